"""How a run is configured: the science (strategies, cases, seeds, dtypes) and the machine (device,
budget), with the defaults the command line, the pipeline and the benches share."""

from __future__ import annotations

from dataclasses import dataclass, field

FUZZ_DTYPES: tuple[str, ...] = ("float32", "float16", "bfloat16")
"""The dtypes a submission is fuzzed at unless its dump or the config says otherwise."""

SUBMISSION_BUDGET_S = {"cpu": 900.0, "cuda": 300.0}
"""Default budgets, far above what a submission that answers needs at the default config: the slowest
of the built-in corpus took 227 s under the CPU interpreter and 17 s on the H200, where a CUDA C
kernel that builds its extension inside a case adds a cold nvcc build of about 75 s."""
SETTLE_AFTER = 2
SETTLE_TIMEOUT_S = 10.0
CALL_FLOOR_S = 5.0
CALL_FACTOR = 50.0
"""A candidate's calls at some sizes may take CALL_FLOOR_S plus CALL_FACTOR times the float64
reference's own time at those sizes (`engine/pacing.py`: `call_limit`). The floor covers what does not
scale with the reference: the Triton interpreter (the slowest built-in corpus case took 2.6 s of one
shared core), a first call's set-up; the factor, a float16 candidate against a float64 reference."""

DEFAULT_BUDGET = {"cpu": 1 << 15, "cuda": 1 << 20}
"""Elements of a fuzz case's largest input tensor, per device, where no config says otherwise
(config/config.yaml writes the pipeline's own, equal to these)."""


def default_budget(device: str) -> int:
    """The element budget of `device` (the CPU's for any device but cuda)."""
    return DEFAULT_BUDGET["cuda" if device == "cuda" else "cpu"]


def submission_budget(config: dict, device: str) -> float | None:
    """The per-submission budget in seconds from a run config's `submission_budget_s` (per device;
    0 turns it off), or the device's default."""
    seconds = float((config.get("submission_budget_s") or {}).get(device, SUBMISSION_BUDGET_S.get(device, 0.0)))
    return seconds or None


@dataclass
class RunConfig:
    """How to run: the science (strategies, cases, seeds, dtypes) and the machine (device, budget)."""

    device: str = "cpu"
    master_seed: int = 0
    strategies: dict[str, int] = field(default_factory=lambda: {"default": 50, "boundary": 50})
    dtypes: tuple[str, ...] = FUZZ_DTYPES
    fixed_profile: str = "kernelbench-v0.1"
    fixed_dtype: str = "float32"
    calibration: dict[str, int] = field(default_factory=dict)  # strategy -> cases on calibration seeds
    timeout_s: float = 120.0
    regressions: bool = False  # replay a submission's stored failures first (failure_store.py): `rescore check`
    load_timeout_s: float = 600.0
    budget: int | None = None  # elements of the largest input tensor; None: the device's default_budget
    submission_budget_s: float | None = None  # wall seconds for one submission's cases (pacing.py); None: no limit
    settle_after: int = SETTLE_AFTER  # this many same worker deaths in a row settle a submission; 0: never
    settle_timeout_s: float = SETTLE_TIMEOUT_S  # the per-case timeout after a case timed out
    call_floor_s: float = CALL_FLOOR_S  # a candidate call's limit: this plus call_factor x the reference's
    call_factor: float = CALL_FACTOR  # time at its sizes (pacing.call_limit); floor 0: timeout_s alone
    dtypes_in_turn: bool = False  # a strategy's evaluation cases take the dtypes in turn, not each dtype
    explain: bool = True  # run the experiments that confirm a failure's cause, and the second call (worker/explain.py)

    def __post_init__(self) -> None:
        if self.budget is None:  # a case's sizes depend on it: a replay on a GPU draws as the GPU run did
            self.budget = default_budget(self.device)
