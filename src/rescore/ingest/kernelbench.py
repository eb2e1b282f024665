"""KernelBench dumps: reference problems (`level{L}/{id}_{Name}.py`, or a Parquet table) and the
generated kernels of one or more runs (`runs/{run}/level_{L}_problem_{P}_sample_{S}_kernel.py`),
with the benchmark's own verdict from each run's `eval_results.json` where it has one.

Spec: `{format: kernelbench, path: DIR, problems: DIR | FILE.parquet, runs: [..], levels: [..],
dtypes: [..]}`. `problems` defaults to DIR/KernelBench, then DIR itself; relative paths are tried
from the working directory, then from DIR.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from rescore.ingest.common import broken, log, materialise, normalize_dtypes, problem_defect
from rescore.model.language import detect_language
from rescore.model.records import Problem, Submission

PROBLEM_FILE = re.compile(r"^(\d+)_(.+)\.py$")
LEVEL_DIR = re.compile(r"^level_?(\d+)$")
KERNEL_FILE = re.compile(r"^level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py$")
PARQUET_COLUMNS = ("code", "level", "name", "problem_id")

Key = tuple[int, int]  # (level, problem id)


class ProblemsUnreadable(ValueError):
    """The problems table as a whole cannot be read (truncated file, missing columns)."""


def read(name: str, spec: dict) -> list[Submission]:
    """Every kernel of the dump's runs, paired with its problem; malformed entries become error rows."""
    root = Path(spec["path"])
    levels = {int(v) for v in spec["levels"]} if spec.get("levels") else None
    dtypes = normalize_dtypes(spec.get("dtypes"))
    location = _problems_location(root, spec.get("problems"))
    try:
        problems: dict[Key, Problem | str] | str = read_problems(location, levels)
    except ProblemsUnreadable as exc:
        problems = str(exc)  # every kernel gets this error
    runs_dir = root / "runs"
    wanted = [str(r) for r in spec.get("runs") or []]
    if wanted:
        run_dirs = [runs_dir / r for r in wanted]
    else:
        run_dirs = sorted(p for p in runs_dir.iterdir() if p.is_dir()) if runs_dir.is_dir() else []
    if not run_dirs:
        return [broken(name, f"{name}/runs", f"kb/{name}", str(runs_dir), "no run folders found")]
    subs: list[Submission] = []
    for run_dir in run_dirs:
        subs += _read_run(name, run_dir, problems, location, levels, dtypes)
    return subs


def _problems_location(root: Path, given) -> Path:
    if given:
        p = Path(given)
        return p if p.exists() or p.is_absolute() else root / p
    default = root / "KernelBench"
    return default if default.is_dir() else root


def read_problems(location: Path, levels: set[int] | None = None) -> dict[Key, Problem | str]:
    """(level, id) -> Problem, or the error that makes that problem unusable (a string).

    Raises ProblemsUnreadable when a problems table cannot be read at all."""
    if location.suffix == ".parquet":
        return _problems_from_parquet(location, levels)
    found: dict[Key, list[Path]] = {}
    if location.is_dir():
        for level_dir in sorted(location.iterdir()):
            m = LEVEL_DIR.match(level_dir.name)
            if not (m and level_dir.is_dir()) or (levels and int(m.group(1)) not in levels):
                continue
            for file in sorted(level_dir.glob("*.py")):
                fm = PROBLEM_FILE.match(file.name)
                if fm:
                    found.setdefault((int(m.group(1)), int(fm.group(1))), []).append(file)
    out: dict[Key, Problem | str] = {}
    for (level, pid), files in found.items():
        if len(files) > 1:
            out[(level, pid)] = f"duplicate problem id {pid} in level {level}: {', '.join(f.name for f in files)}"
            continue
        out[(level, pid)] = _problem(level, pid, PROBLEM_FILE.match(files[0].name).group(2), files[0])
    if not out:
        log.warning("%s: no KernelBench problems (level*/<id>_<Name>.py) found", location)
    return out


def _problem(level: int, pid: int, op: str, file: Path) -> Problem | str:
    try:
        source = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return f"{file}: unreadable: {exc}"
    defect = problem_defect(source)
    if defect:
        return f"{file}: {defect}"
    return Problem(problem_id=f"kb/level{level}/{pid}", source=source, path=str(file), op=op)


def _problems_from_parquet(path: Path, levels: set[int] | None) -> dict[Key, Problem | str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise ProblemsUnreadable(f"{path}: not a readable Parquet table ({exc})") from exc
    missing = [c for c in PARQUET_COLUMNS if c not in table.column_names]
    if missing:
        raise ProblemsUnreadable(f"{path}: problems table lacks columns {missing} (has {table.column_names})")
    out: dict[Key, Problem | str] = {}
    for i, row in enumerate(table.select(list(PARQUET_COLUMNS)).to_pylist()):
        try:
            level, pid = int(row["level"]), int(row["problem_id"])
        except (TypeError, ValueError):
            log.warning("%s: row %d has level %r, problem_id %r; skipped", path, i, row["level"], row["problem_id"])
            continue
        if levels and level not in levels:
            continue
        where = f"{path}[level {level}, problem {pid}]"
        if (level, pid) in out:
            out[(level, pid)] = f"{path}: duplicate problem id {pid} in level {level}"
            continue
        code = row["code"] or ""
        defect = problem_defect(code)
        if defect:
            out[(level, pid)] = f"{where}: {defect}"
            continue
        op = PROBLEM_FILE.match(str(row["name"]))
        out[(level, pid)] = Problem(
            problem_id=f"kb/level{level}/{pid}",
            source=code,
            path=materialise(code, "kb_problem"),
            op=op.group(2) if op else str(row["name"]).removesuffix(".py"),
        )
    return out


def _read_run(
    dump: str,
    run_dir: Path,
    problems: dict[Key, Problem | str] | str,
    location: Path,
    levels: set[int] | None,
    dtypes: tuple[str, ...],
) -> list[Submission]:
    run = run_dir.name
    if not run_dir.is_dir():
        return [broken(dump, f"{run}/*", f"kb/{run}", str(run_dir), "run folder does not exist")]
    kernels = []
    for file in sorted(run_dir.glob("*.py")):
        m = KERNEL_FILE.match(file.name)
        if m and not (levels and int(m.group(1)) not in levels):
            kernels.append((int(m.group(1)), int(m.group(2)), int(m.group(3)), file))
    claims, claim_error = _read_claims(run_dir / "eval_results.json")
    if claims is not None and len({k[0] for k in kernels}) > 1:
        log.warning("%s: eval_results.json is keyed by problem id only, but the run spans several levels", run_dir)
    subs = []
    for level, pid, sample, file in kernels:
        name = f"{run}/level{level}/{pid}/sample{sample}"
        problem_id = f"kb/level{level}/{pid}"
        problem = problems if isinstance(problems, str) else problems.get((level, pid))
        if problem is None:
            missing = f"no problem {pid} in level {level} under {location}"
            subs.append(broken(dump, name, problem_id, str(file), missing))
            continue
        if isinstance(problem, str):
            subs.append(broken(dump, name, problem_id, str(file), f"its problem is unusable: {problem}"))
            continue
        try:
            source = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            subs.append(broken(dump, name, problem_id, str(file), f"unreadable: {exc}"))
            continue
        claimed, record = _claim(claims, pid, sample)
        extra = {"run": run, "level": level, "sample": sample}
        if record:
            extra["eval"] = {k: record.get(k) for k in ("compiled", "correctness", "runtime") if k in record}
        if claim_error:
            extra["claim_error"] = claim_error
        subs.append(
            Submission(
                name=name,
                problem=problem,
                source=source,
                path=str(file),
                dump=dump,
                language=detect_language(source),
                dtypes=dtypes,
                claimed_verdict=claimed,
                provenance=f"KernelBench run {run}",
                extra=extra,
            )
        )
    return subs


def _read_claims(path: Path) -> tuple[dict | None, str | None]:
    """The run's eval_results.json as {problem id: {sample id: record}}; (None, error) when unreadable."""
    if not path.exists():
        return None, None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError("expected an object keyed by problem id")
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        message = f"{path}: unreadable ({exc}); claimed verdicts left empty"
        log.warning(message)
        return None, message
    claims: dict[str, dict[int, dict]] = {}
    for pid, value in data.items():
        records = (
            value
            if isinstance(value, list)
            else (
                [value]
                if isinstance(value, dict) and "compiled" in value
                else [dict(v, sample_id=v.get("sample_id", k)) for k, v in value.items() if isinstance(v, dict)]
                if isinstance(value, dict)
                else []
            )
        )
        for i, rec in enumerate(records):
            if isinstance(rec, dict):
                try:
                    sample = int(rec.get("sample_id", i))
                except (TypeError, ValueError):
                    continue
                claims.setdefault(str(pid), {})[sample] = rec
    return claims, None


def _claim(claims: dict | None, pid: int, sample: int) -> tuple[str | None, dict | None]:
    """The benchmark's verdict on one sample: correct / incorrect / not_compiled (None when absent)."""
    record = (claims or {}).get(str(pid), {}).get(sample)
    if record is None:
        return None, None
    if record.get("compiled") is False:
        return "not_compiled", record
    return ("correct" if record.get("correctness") is True else "incorrect"), record
