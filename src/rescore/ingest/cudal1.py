"""CUDA-L1 dumps: one optimised submission per KernelBench problem, as CUDA-L1 publishes them, either
one JSON file per GPU (`optimized_cuda_code/<gpu>.json`: `{level: [{task_id, ref_code, custom_code}]}`)
or the same unpacked into folders (`<gpu>/<level>/<task>/{ref_code,custom_code}.py`).

Spec: `{format: cudal1, path: FILE.json | DIR, gpu: NAME, levels: [..], entries: [..], dtypes: [..]}`
(`entries`: only these submissions, by name, such as `level1/task14`). DIR holds
`<level>/<task>/` itself, or one `<gpu>.json` or `<gpu>/` per GPU, picked by `gpu`. Every entry was
published as correct and faster under KernelBench's fixed check, which runs float32 only: the claim
is `correct` and the dtypes float32, unless `dtypes:` says more. Submissions are named
`level1/task61`, and each (level, task) is one problem, `cudal1/level1/task61`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from rescore.ingest.common import broken, materialise, normalize_dtypes, problem_defect
from rescore.ingest.pairs import PairError, submission_source
from rescore.model.language import detect_language
from rescore.model.records import Problem, Submission

LEVEL = re.compile(r"^(?:level_?)?(\d+)$")
TASK = re.compile(r"^(?:task_?)?(\d+)$")
PROBLEM_FILE, SUBMISSION_FILE = "ref_code.py", "custom_code.py"


class LayoutError(ValueError):
    """The dump as a whole cannot be read: the message names the path and what is wrong."""


@dataclass
class Entry:
    """One (level, task) as found in the dump, before it is checked; `error` when it cannot be used."""

    name: str
    where: str  # the file (and entry) it came from, for error rows and provenance
    level: int | None = None
    task: int | None = None
    ref_code: object = None
    custom_code: object = None
    problem_path: str = ""  # the file holding ref_code (folder layout), else generated
    submission_path: str = ""
    error: str | None = None


def read(name: str, spec: dict) -> list[Submission]:
    """Every entry of the dump as a Submission claimed correct; malformed entries become error rows."""
    path = Path(spec["path"])
    levels = {int(v) for v in spec["levels"]} if spec.get("levels") else None
    try:
        source = locate(path, spec.get("gpu"))
        entries = from_json(source, levels) if source.is_file() else from_folder(source, levels)
    except LayoutError as exc:
        return [broken(name, f"{name}/*", f"cudal1/{name}", str(path), str(exc))]
    if spec.get("entries"):
        wanted = set(spec["entries"])
        entries = [e for e in entries if e.name in wanted]
    dtypes = normalize_dtypes(spec.get("dtypes"))
    seen: dict[str, str] = {}
    problems: dict[str, Problem] = {}
    subs = []
    for entry in entries:
        if entry.error is None and entry.name in seen:
            entry.error = f"duplicate task {entry.name} (also {seen[entry.name]})"
        seen.setdefault(entry.name, entry.where)
        subs.append(submission(name, entry, dtypes, problems))
    return subs


def locate(path: Path, gpu: str | None) -> Path:
    """The JSON file or the folder of levels to read."""
    if not path.exists():
        raise LayoutError("does not exist")
    if not gpu:
        return path
    if path.is_file():
        raise LayoutError(f"`gpu: {gpu}` picks a GPU in a folder, but this is a file: drop `gpu`, or name the folder")
    for candidate in (path / gpu, path / f"{gpu}.json"):
        if candidate.exists():
            return candidate
    held = sorted(p.name for p in path.iterdir() if not p.name.startswith("."))
    raise LayoutError(f"no {gpu}/ or {gpu}.json here (it holds {held[:12]}); fix `gpu:` in the dump's config")


def from_json(file: Path, levels: set[int] | None) -> list[Entry]:
    """The entries of a `{level: [{task_id, ref_code, custom_code}]}` file, in the file's order."""
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise LayoutError(f"unreadable ({exc})") from exc
    except ValueError as exc:
        raise LayoutError(f"not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise LayoutError(f"expected an object keyed by level, found a JSON {type(data).__name__}")
    entries: list[Entry] = []
    for key, items in data.items():
        m = LEVEL.match(str(key))
        if not m:
            entries.append(Entry(f"level{key}/*", f"{file} level {key!r}", error="the level key is not a number"))
            continue
        level = int(m.group(1))
        if levels and level not in levels:
            continue
        if not isinstance(items, list):
            where = f"{file} level {key}"
            found = type(items).__name__
            entries.append(Entry(f"level{level}/*", where, level, error=f"expected a list of entries, found {found}"))
            continue
        for i, item in enumerate(items):
            entries.append(_json_entry(file, key, level, i, item))
    return entries


def _json_entry(file: Path, key: str, level: int, i: int, item: object) -> Entry:
    where = f"{file} level {key} entry {i}"
    if not isinstance(item, dict):
        return Entry(f"level{level}/entry{i}", where, level, error=f"expected an object, found {type(item).__name__}")
    task = _task_number(item.get("task_id"))
    if task is None:
        return Entry(f"level{level}/entry{i}", where, level, error=f"task_id {item.get('task_id')!r} is not a number")
    return Entry(
        f"level{level}/task{task}",
        where,
        level,
        task,
        ref_code=item.get("ref_code"),
        custom_code=item.get("custom_code"),
    )


def _task_number(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    m = TASK.match(str(value).strip()) if isinstance(value, str) else None
    return int(m.group(1)) if m else None


def from_folder(root: Path, levels: set[int] | None) -> list[Entry]:
    """The entries of `<level>/<task>/{ref_code,custom_code}.py` under `root`, in level and task order."""
    level_dirs = sorted(
        ((int(m.group(1)), d) for d in root.iterdir() if d.is_dir() and (m := LEVEL.match(d.name))),
        key=lambda pair: pair[0],
    )
    if not level_dirs:
        held = sorted(p.name for p in root.iterdir() if not p.name.startswith("."))
        raise LayoutError(
            f"no <level>/<task>/ folders (such as 1/61/{PROBLEM_FILE}) here; it holds {held[:12]}: "
            "for a folder with one sub-folder per GPU, name one with `gpu:`"
        )
    entries: list[Entry] = []
    for level, level_dir in level_dirs:
        if levels and level not in levels:
            continue
        tasks = []
        for d in level_dir.iterdir():
            if not d.is_dir() or d.name.startswith("."):
                continue
            m = TASK.match(d.name)
            if not m:
                entries.append(Entry(f"level{level}/{d.name}", str(d), level, error="folder name is not a task number"))
                continue
            tasks.append((int(m.group(1)), d))
        for task, d in sorted(tasks, key=lambda pair: pair[0]):
            entries.append(_folder_entry(level, task, d))
    return entries


def _folder_entry(level: int, task: int, folder: Path) -> Entry:
    entry = Entry(f"level{level}/task{task}", str(folder), level, task)
    codes = []
    for file_name in (PROBLEM_FILE, SUBMISSION_FILE):
        file = folder / file_name
        try:
            codes.append(file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            entry.error = f"no {file_name} (each task folder holds {PROBLEM_FILE} and {SUBMISSION_FILE})"
            return entry
        except (OSError, UnicodeDecodeError) as exc:
            entry.where, entry.error = str(file), f"unreadable ({exc})"
            return entry
    entry.ref_code, entry.custom_code = codes
    entry.problem_path, entry.submission_path = str(folder / PROBLEM_FILE), str(folder / SUBMISSION_FILE)
    return entry


def submission(dump: str, entry: Entry, dtypes: tuple[str, ...], problems: dict[str, Problem]) -> Submission:
    """The Submission of one entry (an error row when the entry cannot be used)."""
    problem_id = f"cudal1/level{entry.level}/task{entry.task}" if entry.task is not None else f"cudal1/{entry.name}"

    def error(why: str, source: str = "") -> Submission:
        return broken(dump, entry.name, problem_id, entry.where, why, source=source)

    if entry.error:
        return error(entry.error)
    ref, code = entry.ref_code, entry.custom_code
    if not isinstance(ref, str) or not ref.strip():
        return error("empty ref_code (the KernelBench problem)")
    defect = problem_defect(ref)
    if defect:
        return error(f"ref_code: {defect}")
    if not isinstance(code, str) or not code.strip():
        return error("empty custom_code (the submission)")
    try:
        source, how = submission_source(code, ref, None, entry.name)
    except PairError as exc:
        return error(f"custom_code: {exc}", source=code)
    problem = problems.get(problem_id)
    if problem is None:
        problem = problems[problem_id] = Problem(
            problem_id=problem_id,
            source=ref,
            path=entry.problem_path or materialise(ref, "cudal1_problem"),
            op=f"level{entry.level}/task{entry.task}",
        )
    as_is = how == "as_is" and entry.submission_path
    return Submission(
        name=entry.name,
        problem=problem,
        source=source,
        path=entry.submission_path if as_is else materialise(source, "cudal1_submission"),
        dump=dump,
        language=detect_language(source),
        dtypes=dtypes,
        claimed_verdict="correct",
        provenance=f"CUDA-L1 {entry.where}",
        extra={"level": entry.level, "task": entry.task, "wrapped": how},
    )
