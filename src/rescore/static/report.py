"""Text report of one kernel file's static metrics, for `rescore static KERNEL.py [--problem P]`.

Why: a researcher checking one submission wants its launches, what each compiles to on sm_90 and
sm_80, and why it did not, in one screen, without a GPU.
"""

from __future__ import annotations

import json
from pathlib import Path

from rescore.model.outcomes import RunStatus
from rescore.static.compile import ARCHS, compile_launches
from rescore.static.launches import capture_launches
from rescore.static.metrics import CLASSES


def find_problem(submission_path: str | Path, problem_path: str | Path | None = None) -> Path:
    """The given problem file, else `problem.py` next to the kernel file."""
    if problem_path is not None:
        return Path(problem_path)
    candidate = Path(submission_path).resolve().parent / "problem.py"
    if not candidate.exists():
        raise FileNotFoundError(f"no problem given and no {candidate}")
    return candidate


def _fmt(v: object) -> str:
    return "-" if v is None else str(v)


def describe_kernel(
    submission_path: str | Path,
    problem_path: str | Path | None = None,
    *,
    archs: tuple[int, ...] = ARCHS,
    cache_dir: str | Path | None = None,
    timeout: float = 300.0,
) -> str:
    """Capture the submission's launches at the problem's fixed shape, compile them, describe them."""
    problem = find_problem(submission_path, problem_path)
    cap = capture_launches(problem, submission_path, timeout=timeout, cache_dir=cache_dir)
    lines = [
        f"kernel file: {submission_path}",
        f"problem:     {problem}",
        f"capture:     {cap['outcome']}"
        + (" on an emulated CUDA device (the kernel is CUDA-only)" if cap.get("device") == "emulated_cuda" else "")
        + (f" ({cap['error']})" if cap.get("error") else ""),
    ]
    if cap["outcome"] != RunStatus.OK:
        return "\n".join(lines)
    rows = compile_launches(submission_path, cap["launches"], archs=archs, timeout=timeout, cache_dir=cache_dir)
    for launch in cap["launches"]:
        lines += [
            "",
            f"[{launch['index']}] {launch['qualname']}  launched {launch['count']}x, grid {launch['grid']}",
        ]
        lines.append("    signature:  " + ", ".join(f"{k}: {v}" for k, v in launch["signature"].items()))
        if launch["constexprs"]:
            lines.append("    constexprs: " + json.dumps(launch["constexprs"], default=str))
        if launch["attrs"]:
            lines.append("    div by 16:  " + ", ".join(launch["attrs"]))
        if launch["options"]:
            lines.append("    options:    " + json.dumps(launch["options"], default=str))
        for r in (r for r in rows if r["kernel_index"] == launch["index"]):
            if r["outcome"] != RunStatus.OK:
                lines.append(f"    {r['arch']}: {r['outcome']}: {r.get('error')}")
                continue
            lines.append(
                f"    {r['arch']}: regs {_fmt(r['registers'])}  spills {_fmt(r['spill_bytes'])} B  "
                f"smem {_fmt(r['shared'])} B  local {_fmt(r['local'])} B  instrs {r['instructions']}  "
                f"immediates {r['immediates']}  ptx {r['ptx_hash']}  (warps {r.get('num_warps')}, "
                f"stages {r.get('num_stages')})"
            )
            hist = ", ".join(f"{c} {r[f'n_{c}']}" for c in CLASSES if r.get(f"n_{c}"))
            lines.append(f"           {hist}; predicated mem {r['predicated_mem']}")
            if r.get("ptx_path"):
                lines.append(f"           ptx: {r['ptx_path']}")
    return "\n".join(lines)
