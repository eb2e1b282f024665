"""Packs the steps of a GPU lease run (scripts/gpu/gpu_lease.sh) for the trip back, within what one
call of the device tool returns: at most 8 files of at most 16 MiB, and here at most 60 MB in all.

    python scripts/gpu/pack_steps.py step WORK NAME   # after step NAME ended: WORK/packs/NAME.tgz
    python scripts/gpu/pack_steps.py finished WORK OUT  # the finished steps' packs into OUT (while watching)
    python scripts/gpu/pack_steps.py out WORK OUT     # a call's end: OUT holds status.tgz, every finished
                                                      # step's pack, and a partial pack of a running one

A pipeline step's pack holds its tables, papers, figures, logs, progress files, `snakemake.out` and
config; never its ingest manifests (the dumps' own sources), reproducers or caches, nor its workers'
logs, of which it keeps each worker's start line (`results/logs/worker_starts.txt`: where the
seconds before its first request went). A step still
running also packs its check shards' case and phase files, from which `tools/partial_tables.py` makes
the tables and `bench/phases.py` the phase summary. A step with no `results/` (the GPU fixtures) is
packed whole. A pack over 15 MiB is split into `NAME.tgz.part-aa`, `-ab`, ... (`cat NAME.tgz.part-*
| tar -xz`). What does not fit is left out, the largest partial pack first, and `status.tgz`'s
MANIFEST.txt says so.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tarfile
from pathlib import Path, PurePosixPath

PART = 15 << 20
MAX_FILES = 8
MAX_BYTES = 60_000_000
STATUS_MAX = 1 << 20  # a top-level file larger than this is left out of status.tgz
ALWAYS_OUT = ("results/ingest/", "results/failures/reproducers/", ".snakemake/", ".rescore-cache/")
KEEP_DIRS = ("results/tables/", "results/papers/", "results/figures/", "results/logs/", "results/progress/",
             "results/cuda_builds/", "results/degenerate/")
KEEP_FILES = ("snakemake.out", "config/config.yaml", "results/*.md", "results/*.parquet",
              "results/failures/failures.parquet", "results/failures/shrunk.parquet")
SHARD_DIRS = ("results/cases/", "results/phases/", "results/failures/shrunk/")


def members(step: Path, finished: bool) -> list[Path]:
    """The files of a step's folder that its pack holds, relative to the folder: a pipeline step's
    tables, logs and record (with the check shards' case files while it runs, or when it ended
    without its cases table); any other step's every file."""
    pipeline = (step / "snakemake.out").exists()
    shards = not finished or not (step / "results" / "tables" / "cases.parquet").exists()
    dirs = KEEP_DIRS + (SHARD_DIRS if shards else ())
    out = []
    for path in sorted(p for p in step.rglob("*") if p.is_file() and not p.is_symlink()):
        rel = PurePosixPath(path.relative_to(step).as_posix())
        text = str(rel)
        if text.startswith(ALWAYS_OUT) or any(part.endswith(".workers") or part == "__pycache__" for part in rel.parts):
            continue
        if not pipeline or text.startswith(dirs) or any(
                len(rel.parts) == len(PurePosixPath(pat).parts) and rel.match(pat) for pat in KEEP_FILES):
            out.append(Path(text))
    return out


WORKER_STARTS = "results/logs/worker_starts.txt"
START_LINE = " ready in "  # rescore.worker.loop.start_line's


def gather_worker_starts(step: Path) -> None:
    """Every worker's start line of a pipeline step (its log folders' `*.workers/*.log`, which the
    pack leaves out) into WORKER_STARTS, each after its log's path."""
    logs = step / "results" / "logs"
    if not logs.is_dir():
        return
    lines = []
    for path in sorted(logs.rglob("*.workers/*.log")):
        found = [line for line in path.read_text(errors="replace").splitlines() if START_LINE in line]
        lines += [f"{path.relative_to(logs)}: {line}" for line in found]
    if lines:
        (step / WORKER_STARTS).write_text("\n".join(lines) + "\n")


def pack_step(work: Path, name: str, finished: bool = True) -> Path:
    """WORK/packs/NAME.tgz (or partial-NAME.tgz for a step still running), its paths under NAME/."""
    gather_worker_starts(work / name)
    packs = work / "packs"
    packs.mkdir(exist_ok=True)
    target = packs / (f"{name}.tgz" if finished else f"partial-{name}.tgz")
    tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")  # the driver and a call may pack at once
    with tarfile.open(tmp, "w:gz") as tar:
        for rel in members(work / name, finished):
            tar.add(work / name / rel, arcname=f"{name}/{rel.as_posix()}")
    tmp.replace(target)
    return target


# WORK's folders that are no step: the packs, and the copy of the checkout the steps run from
# (snapshot.sh; repo.tmp while it is made)
NOT_STEPS = {"packs", "repo", "repo.tmp"}


def steps(work: Path) -> list[tuple[str, bool]]:
    """(step, finished) for each step folder of WORK, finished ones first in the order they ended."""
    found = [(p.name, (work / f"{p.name}.done").exists()) for p in work.iterdir()
             if p.is_dir() and p.name not in NOT_STEPS and not p.name.startswith(".")]
    done = sorted((s for s in found if s[1]), key=lambda s: (work / f"{s[0]}.done").stat().st_mtime)
    return done + sorted(s for s in found if not s[1])


def _pieces(pack: Path) -> list[tuple[str, int]]:
    """(file name in OUT, bytes) of a pack once split into parts of at most PART bytes."""
    size = pack.stat().st_size
    if size <= PART:
        return [(pack.name, size)]
    n = -(-size // PART)
    return [(f"{pack.name}.part-a{chr(ord('a') + i)}", min(PART, size - i * PART)) for i in range(n)]


def _copy(pack: Path, out: Path) -> list[str]:
    names = [name for name, _ in _pieces(pack)]
    if len(names) == 1:
        shutil.copyfile(pack, out / names[0])
        return names
    with open(pack, "rb") as src:
        for name in names:
            (out / name).write_bytes(src.read(PART))
    return names


def plan(packs: list[Path]) -> tuple[list[Path], list[Path]]:
    """(packs that fit, packs left out): one file and STATUS_MAX bytes kept for status.tgz; partial
    packs are dropped first, largest first, then finished ones from the last."""
    chosen = list(packs)
    reserve = STATUS_MAX
    left: list[Path] = []

    def fits() -> bool:
        pieces = [p for pack in chosen for p in _pieces(pack)]
        return len(pieces) + 1 <= MAX_FILES and sum(b for _, b in pieces) + reserve <= MAX_BYTES

    while chosen and not fits():
        partial = [p for p in chosen if p.name.startswith("partial-")]
        drop = max(partial, key=lambda p: p.stat().st_size) if partial else chosen[-1]
        chosen.remove(drop)
        left.append(drop)
    return chosen, left


def write_status(work: Path, out: Path, listing: list[str]) -> None:
    """OUT/status.tgz: WORK's small top-level files (driver.log, watch.txt, machine.txt, the .done
    marks, the configs) and MANIFEST.txt."""
    manifest = work / "MANIFEST.txt"
    manifest.write_text("\n".join(listing) + "\n")
    with tarfile.open(out / "status.tgz", "w:gz") as tar:
        for path in sorted(work.iterdir()):
            if path.is_file() and path.stat().st_size <= STATUS_MAX and not path.name.endswith(".pid"):
                tar.add(path, arcname=path.name)


def out_call(work: Path, out: Path) -> list[str]:
    """Fill OUT for the end of a call (see the module's docstring); returns the manifest's lines."""
    out.mkdir(parents=True, exist_ok=True)
    packs = []
    for name, finished in steps(work):
        pack = work / "packs" / f"{name}.tgz"
        if not finished:
            packs.append(pack_step(work, name, finished=False))
        else:
            packs.append(pack if pack.exists() else pack_step(work, name))
    chosen, left = plan(packs)
    for old in out.iterdir():
        if old.name.startswith(("status.tgz", "partial-")) or old.suffix == ".tgz" or ".tgz.part-" in old.name:
            old.unlink()
    listing = []
    for pack in chosen:
        listing += [f"{name} ({(out / name).stat().st_size:,} bytes)" for name in _copy(pack, out)]
    listing += [f"LEFT OUT (over the limits of one call): {p.name} ({p.stat().st_size:,} bytes)" for p in left]
    write_status(work, out, listing)
    total = sum(f.stat().st_size for f in out.iterdir() if f.is_file())
    listing.append(f"status.tgz; {len(list(out.iterdir()))} files, {total:,} bytes in all")
    return listing


def finished_call(work: Path, out: Path) -> None:
    """Copy each finished step's pack into OUT once (while a call watches): a call cut short still
    returns them. Packs that would break the limits wait for the call's end."""
    out.mkdir(parents=True, exist_ok=True)
    packs = [work / "packs" / f"{name}.tgz" for name, finished in steps(work) if finished]
    chosen, _ = plan([p for p in packs if p.exists()])
    for pack in chosen:
        if not (out / _pieces(pack)[0][0]).exists():
            _copy(pack, out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["step", "finished", "out"])
    parser.add_argument("work", type=Path)
    parser.add_argument("target", help="step: the step's name; finished, out: the folder $OUT")
    args = parser.parse_args(argv)
    if args.mode == "step":
        print(pack_step(args.work, args.target))
    elif args.mode == "finished":
        finished_call(args.work, Path(args.target))
    else:
        print("\n".join(out_call(args.work, Path(args.target))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
