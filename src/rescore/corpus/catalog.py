"""Reads the built-in corpus (`ops/<op>/entries*.yaml`) into Submissions, and writes its catalog.

Pairing of a buggy variant with its control is read from the entry's `control` field, never from
names. A malformed entry is an error that names the file and the entry.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from rescore.model import paths
from rescore.model.records import LABELS, Problem, Submission

CORPUS_ROOT = paths.CORPUS_ROOT
LANGUAGES = ("triton", "cuda", "torch")
REQUIRED = ("id", "label", "language")


class CorpusError(ValueError):
    """A corpus file that does not follow docs/corpus-format.md."""


def _read_yaml(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise CorpusError(f"{path}: cannot be read as YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise CorpusError(f"{path}: expected a mapping with an `entries:` list")
    return data


def load_op(folder: Path, root: Path) -> list[Submission]:
    """The submissions of one op folder (its entries.yaml and any entries.<tag>.yaml)."""
    main = folder / "entries.yaml"
    if not main.exists():
        raise CorpusError(f"{folder}: no entries.yaml")
    head = _read_yaml(main)
    op = str(head.get("op") or folder.name)
    problem_file = folder / str(head.get("problem", "problem.py"))
    if not problem_file.exists():
        raise CorpusError(f"{main}: problem file {problem_file.name} does not exist")
    schema = dict(head.get("schema") or {})
    if head.get("family"):
        schema.setdefault("family", head["family"])
    problem = Problem(
        problem_id=f"corpus/{op}",
        source=problem_file.read_text(encoding="utf-8"),
        path=_rel(problem_file, root),
        op=op,
        schema=schema or None,
        tolerance=head.get("tolerance"),
    )
    entries = list(head.get("entries") or [])
    for extra in sorted(folder.glob("entries.*.yaml")):
        entries += list(_read_yaml(extra).get("entries") or [])
    subs = []
    for entry in entries:
        subs.append(_submission(entry, folder, problem, main, root))
    return subs


def _rel(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def _submission(entry: dict, folder: Path, problem: Problem, where: Path, root: Path) -> Submission:
    missing = [k for k in REQUIRED if k not in entry]
    if missing:
        raise CorpusError(f"{where}: entry {entry.get('id', '?')!r} lacks {missing}")
    if entry["label"] not in LABELS:
        raise CorpusError(f"{where}: entry {entry['id']!r} has label {entry['label']!r}; use one of {LABELS}")
    if entry["language"] not in LANGUAGES:
        raise CorpusError(f"{where}: entry {entry['id']!r} has language {entry['language']!r}")
    if entry["label"] == "buggy" and not (entry.get("bug_class") and entry.get("control") and entry.get("trigger")):
        raise CorpusError(f"{where}: buggy entry {entry['id']!r} needs bug_class, control and trigger")
    file = folder / str(entry.get("file", f"{entry['id']}.py"))
    if not file.exists():
        raise CorpusError(f"{where}: entry {entry['id']!r}: file {file.name} does not exist")
    return Submission(
        name=str(entry["id"]),
        problem=problem,
        source=file.read_text(encoding="utf-8"),
        path=_rel(file, root),
        dump="corpus",
        language=entry["language"],
        label=entry["label"],
        bug_class=entry.get("bug_class"),
        control=entry.get("control"),
        description=str(entry.get("description", "")),
        trigger=entry.get("trigger"),
        dtypes=tuple(entry.get("dtypes") or ("float32", "float16", "bfloat16")),
        declines=entry.get("declines"),
        provenance=str(entry.get("provenance", "")),
    )


def load_corpus(root: Path | None = None, ops: list[str] | None = None, base: Path | None = None) -> list[Submission]:
    """Every corpus submission, sorted by op then name; `ops` restricts to some op folders.

    Paths are recorded relative to `base` (default: the current directory) where they lie under it,
    so replay commands stay short and portable.
    """
    root = root or CORPUS_ROOT
    base = base or Path.cwd()
    subs: list[Submission] = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))):
        if ops and folder.name not in ops:
            continue
        if not (folder / "entries.yaml").exists():
            continue
        subs += load_op(folder, base)
    names = [s.name for s in subs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise CorpusError(f"{root}: duplicate entry ids {dupes}")
    known = {s.name: s for s in subs}
    for s in subs:
        if s.control and s.control not in known:
            raise CorpusError(f"{s.path}: control {s.control!r} of {s.name!r} is not a corpus entry")
    return subs


def catalog_rows(subs: list[Submission]) -> list[dict]:
    return [s.row() for s in subs]


def catalog_markdown(subs: list[Submission]) -> str:
    """The corpus as a Markdown table (docs/corpus.md is generated from it)."""
    lines = [
        "| id | op | language | label | bug class | trigger | dtypes | description |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in subs:
        trig = ""
        if s.trigger:
            trig = ", ".join(f"{k}={v}" for k, v in s.trigger.items())
        desc = (s.description or (f"declines {s.declines}" if s.declines else "")).replace("|", "\\|")
        lines.append(
            f"| {s.name} | {s.problem.op} | {s.language} | {s.label} | {s.bug_class or ''} | "
            f"{trig.replace('|', '/')} | {', '.join(s.dtypes)} | {desc} |"
        )
    n_bug = sum(s.label == "buggy" for s in subs)
    classes = sorted({s.bug_class for s in subs if s.bug_class})
    head = (
        f"{len(subs)} entries over {len({s.problem.op for s in subs})} ops: {len(subs) - n_bug} correct, "
        f"{n_bug} buggy in {len(classes)} bug classes.\n\n"
    )
    return head + "\n".join(lines) + "\n"
