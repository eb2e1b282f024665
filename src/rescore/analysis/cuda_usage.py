"""Whether each CUDA submission's own CUDA ran, from its cases (`cuda_ran`, `cuda_build`: recorded by
the check worker, worker/usage.py), and the builds table that joins the prebuild's record with it.

The prebuild can say that an extension compiled and loaded, never that it was called: a submission
that loads its library and then computes with PyTorch, or that catches a failed build and falls
back, answers right and looks built. Only the cases can say: `built` in the gathered table means
compiled, loaded and called in at least one case.
"""

from __future__ import annotations

import pandas as pd

from rescore.model.builds import NEVER_RAN, BuildStatus, CudaRan, stages

# The statuses a CUDA submission's cases may record, most telling first: why its CUDA did not run.
_WHY_ORDER = (BuildStatus.COMPILE_FAILED, BuildStatus.LOAD_FAILED, BuildStatus.NOT_CALLED, BuildStatus.LOADED,
              BuildStatus.NO_BUILD)


def submission_cuda(rows: pd.DataFrame) -> tuple[str | None, str | None]:
    """(cuda_ran, cuda_build) of one submission from its case rows: yes (built) when any case ran its
    CUDA; else no, with the most telling reason its cases recorded; else unknown; (None, None)
    when no case records it (not a CUDA submission, none of its cases reached the candidate, or
    cases from a rescore that did not record it)."""
    if "cuda_ran" not in rows or rows["cuda_ran"].isna().all():
        return None, None
    ran = rows["cuda_ran"].dropna()
    if ran.eq(CudaRan.YES).any():
        return CudaRan.YES.value, BuildStatus.BUILT.value
    seen = set(rows["cuda_build"].dropna()) if "cuda_build" in rows else set()
    why = next((s.value for s in _WHY_ORDER if s in seen), None)
    return (CudaRan.NO if ran.eq(CudaRan.NO).any() else CudaRan.UNKNOWN).value, why


def cuda_by_submission(cases: pd.DataFrame) -> dict[str, tuple[str | None, str | None]]:
    """submission_id -> (cuda_ran, cuda_build), for the submissions whose cases record it."""
    if "cuda_ran" not in cases:
        return {}
    known = cases[cases["cuda_ran"].notna()]
    return {sid: submission_cuda(g) for sid, g in known.groupby("submission_id")}


def _build_errors(cases: pd.DataFrame) -> dict[str, str]:
    """submission_id -> the first error its cases recorded of a build in the worker (`cuda_build_error`)."""
    if "cuda_build_error" not in cases:
        return {}
    errors = cases[cases["cuda_build_error"].notna()]
    return errors.groupby("submission_id")["cuda_build_error"].first().to_dict()


def gathered_builds(builds: pd.DataFrame, cases: pd.DataFrame) -> pd.DataFrame:
    """The prebuild's rows (every dump's), each with what the cases say: `called` (a case ran one of
    its functions), `cuda_ran`, and the final status: `built` (compiled, loaded and called),
    `not_called` (compiled and loaded, never called), or what failed (`compile_failed`,
    `load_failed`: also where the prebuild built nothing and the worker's own build failed, with the
    error its cases recorded). A
    status the cases cannot settle (no case reached the candidate, or cases from an older rescore)
    stays the prebuild's."""
    if builds.empty:
        return builds.assign(cuda_ran=pd.Series(dtype=object))
    seen = cuda_by_submission(cases)
    said = _build_errors(cases)
    rows = []
    for r in builds.to_dict("records"):
        ran, why = seen.get(r["submission_id"], (None, None))
        status = r["status"]
        if ran == CudaRan.YES:
            status = BuildStatus.BUILT.value
        elif ran == CudaRan.NO and status in (BuildStatus.LOADED, BuildStatus.NO_BUILD):
            status = why or status
        if status in (BuildStatus.COMPILE_FAILED, BuildStatus.LOAD_FAILED) and pd.isna(r.get("error")):
            r = dict(r, error=said.get(r["submission_id"]))  # the worker's build: the prebuild saw none
        compiled, loaded = stages(status)
        if compiled is None:  # a status that does not say: as the build recorded it
            compiled, loaded = r.get("compiled"), r.get("loaded")
        called = True if ran == CudaRan.YES else (False if status in NEVER_RAN else None)
        rows.append(dict(r, status=status, compiled=compiled, loaded=loaded, called=called, cuda_ran=ran))
    out = pd.DataFrame(rows, columns=[*builds.columns, "cuda_ran"])
    for col in ("ok", "compiled", "loaded", "called"):
        if col in out:
            out[col] = out[col].astype("boolean")
    return out
