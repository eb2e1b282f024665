"""How many CUDA submissions of a run never ran their own CUDA, and why (a results folder):

python tools/cuda_ran.py RESULTS_DIR [--dump cudal1] [--list] [--root DIR]

A run whose cases record `cuda_ran` (worker/usage.py) is read from them: per submission, yes when
a case called a function of a library it built, else why not (`cuda_build`: compile_failed,
load_failed, not_called), with the build's error from `cuda_builds.parquet`. A run made before
that column existed is read from what it kept: a submission's build failed when a worker log holds
a compiler error in its source's build folder (`<source hash>/<extension>/...: error`) or the
submission's own "Error building extension '<name>'" for a name only it builds; without one, a
submission whose every answered case carries the `torch_fallback` finding never ran its CUDA, for
a reason the run did not record (a failure worded otherwise, or nothing called); any other ran its
CUDA on some case, as far as the findings tell.

Prints one Markdown table per dump and API (`load_inline`, `load`, read from each submission's
source where its `source_path` exists under `--root`, the run's working folder: default
RESULTS_DIR/..), and with `--list` one row per CUDA submission.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

import pandas as pd

from rescore.analysis.cuda_usage import cuda_by_submission
from rescore.model.builds import NEVER_RAN, BuildStatus, CudaRan
from rescore.model.findings import split
from rescore.model.outcomes import TOLERANCE_JUDGED

COMPILER_ERROR = re.compile(r"\b([0-9a-f]{16})/[\w.-]+/[^\s:(]+(?:\(\d+\)|:\d+(?::\d+)?):\s*(?:fatal\s+)?error\b")
TORCH_BUILD_ERROR = re.compile(r"Error building extension '([\w.-]+)'")
ID_SUFFIX = re.compile(r"_\d{6,}$")  # extension names made unique with id(self)


def log_failures(results: Path, builds: pd.DataFrame) -> dict[str, str]:
    """submission_id -> the first build error its check workers logged (a run before `cuda_ran`)."""
    by_hash = dict(zip(builds["source_hash"], builds["submission_id"]))
    names: dict[str, set[str]] = {}
    for sid, exts in zip(builds["submission_id"], builds["extensions"].fillna("")):
        for ext in filter(None, exts.split(",")):
            names.setdefault(ID_SUFFIX.sub("", ext), set()).add(sid)
    found: dict[str, str] = {}
    for log in sorted((results / "logs" / "check").rglob("*.log")):
        for line in log.read_text(errors="replace").splitlines():
            m = COMPILER_ERROR.search(line)
            sid = by_hash.get(m.group(1)) if m else None
            if sid is None and (t := TORCH_BUILD_ERROR.search(line)):
                owners = names.get(ID_SUFFIX.sub("", t.group(1)), set())
                sid = next(iter(owners)) if len(owners) == 1 else None
            if sid is not None:
                found.setdefault(sid, line.strip()[:300])
    return found


def from_findings(cases: pd.DataFrame, builds: pd.DataFrame, results: Path) -> dict[str, tuple[str, str, str]]:
    """submission_id -> (cuda_ran, why, evidence) from the worker logs' build errors and the
    torch_fallback finding: a logged build error, or a fallback on every answered case, says its CUDA
    never ran; a build error outranks the finding (a fallback through other PyTorch ops than the
    reference's does not show as one)."""
    failed = log_failures(results, builds)
    out = {}
    answered = cases[cases["outcome"].isin(TOLERANCE_JUDGED)]
    for sid in builds["submission_id"]:
        rows = answered[answered["submission_id"] == sid]
        fell_back = sum("torch_fallback" in split(f) for f in rows["findings"].fillna(""))
        seen = f"torch_fallback on {fell_back} of {len(rows)} answered cases"
        if sid in failed:
            out[sid] = (CudaRan.NO.value, BuildStatus.COMPILE_FAILED.value, f"{failed[sid]} ({seen})")
        elif not len(rows):
            out[sid] = (CudaRan.UNKNOWN.value, "", "no case answered")
        elif fell_back == len(rows):  # a failure the logs do not show in those words, or nothing called
            out[sid] = (CudaRan.NO.value, "", f"{seen}; no build error in the logs")
        else:
            out[sid] = (CudaRan.YES.value, "", seen)
    return out


def from_cases(cases: pd.DataFrame, builds: pd.DataFrame) -> dict[str, tuple[str, str, str]]:
    """submission_id -> (cuda_ran, why, evidence) from the cases' own columns."""
    errors = dict(zip(builds["submission_id"], builds["error"].fillna("")))
    seen = cuda_by_submission(cases)
    out = {}
    for sid in builds["submission_id"]:
        ran, why = seen.get(sid, (CudaRan.UNKNOWN.value, ""))
        evidence = (errors.get(sid) or "").splitlines()[0][:300] if errors.get(sid) else ""
        out[sid] = (ran or CudaRan.UNKNOWN.value, why or "", evidence)
    return out


def api(path: object, root: Path) -> str:
    """How a submission builds its CUDA: load_inline, load (sources in files), other, or unread."""
    file = Path(str(path)) if isinstance(path, str) else None
    if file is not None and not file.is_absolute():
        file = root / file
    if file is None or not file.is_file():
        return "source not found"
    text = file.read_text(errors="replace")
    if "load_inline" in text:
        return "load_inline"
    return "load" if "cpp_extension" in text and "load(" in text else "other"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path)
    parser.add_argument("--dump", default=None, help="only this dump (default: every dump with CUDA submissions)")
    parser.add_argument("--list", action="store_true", help="one row per CUDA submission")
    parser.add_argument("--root", type=Path, default=None,
                        help="the folder the submissions' source_path are relative to (default RESULTS_DIR/..)")
    args = parser.parse_args()
    subs = pd.read_parquet(args.results / "tables" / "submissions.parquet")
    cases = pd.read_parquet(args.results / "tables" / "cases.parquet")
    builds = pd.read_parquet(args.results / "cuda_builds.parquet")
    if args.dump:
        builds = builds[builds["dump"] == args.dump]
    recorded = "cuda_ran" in cases and cases["cuda_ran"].notna().any()
    verdicts = from_cases(cases, builds) if recorded else from_findings(cases, builds, args.results)
    print(f"evidence: {'the cases column cuda_ran' if recorded else 'torch_fallback findings and worker logs'} "
          f"({args.results})\n")
    paths = subs.set_index("submission_id")["source_path"]
    root = args.root or args.results.resolve().parent
    builds = builds.assign(api=[api(paths.get(s), root) for s in builds["submission_id"]])
    print("| dump | API | CUDA submissions | ran | never ran | build failed | load failed | never called | "
          "not recorded | unknown |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (dump, how), g in builds.groupby(["dump", "api"]):
        ran = Counter(verdicts[s][0] for s in g["submission_id"])
        why = Counter(verdicts[s][1] for s in g["submission_id"] if verdicts[s][0] == CudaRan.NO)
        print(f"| {dump} | {how} | {len(g)} | {ran[CudaRan.YES.value]} | {ran[CudaRan.NO.value]} | "
              + " | ".join(str(why[s.value]) for s in NEVER_RAN) + f" | {why['']} | {ran[CudaRan.UNKNOWN.value]} |")
    if args.list:
        names = subs.set_index("submission_id")["name"]
        print("\n| submission | API | cuda_ran | why | evidence |\n|---|---|---|---|---|")
        for r in sorted(builds.to_dict("records"), key=lambda r: names.get(r["submission_id"], "")):
            ran, why, evidence = verdicts[r["submission_id"]]
            print(f"| {names.get(r['submission_id'])} | {r['api']} | {ran} | {NEVER_RAN.get(why, why)} | "
                  f"{evidence.replace('|', '/')} |")


if __name__ == "__main__":
    main()
