"""The run's settings from the validated Snakemake config, as one RunConfig for every stage that runs kernels."""

from __future__ import annotations

from rescore.model.run import CALL_FACTOR, CALL_FLOOR_S, SETTLE_AFTER, SETTLE_TIMEOUT_S, RunConfig, submission_budget
from rescore.model.settings import effective_config
from rescore.runtime.device import resolve_device


def run_config(config: dict) -> RunConfig:
    """The run's settings from the validated Snakemake config."""
    device = resolve_device(config.get("device", "auto"))
    config = effective_config(config, device)
    fuzz = config["fuzz"]
    settle = config.get("settle") or {}
    call = config.get("call_limit") or {}
    strategies = dict(fuzz["strategies"])
    for name in config.get("study", {}).get("strategies", []):
        strategies.setdefault(name, int(config["study"]["seeds"]))
    return RunConfig(
        device=device,
        master_seed=int(config.get("master_seed", 0)),
        strategies=strategies,
        dtypes=tuple(fuzz["dtypes"]),
        fixed_profile=config["fixed"]["profile"],
        fixed_dtype=config["fixed"].get("dtype", "float32"),
        calibration=dict(config.get("calibration", {}).get("strategies", {})),
        timeout_s=float(config.get("timeout_s", 120)),
        budget=int(config["budget"][device]),
        submission_budget_s=submission_budget(config, device),
        settle_after=int(settle.get("after", SETTLE_AFTER)),
        settle_timeout_s=float(settle.get("timeout_s", SETTLE_TIMEOUT_S)),
        call_floor_s=float(call.get("floor_s", CALL_FLOOR_S)),
        call_factor=float(call.get("factor", CALL_FACTOR)),
        dtypes_in_turn=bool(fuzz.get("dtypes_in_turn", False)),
        explain=bool(fuzz.get("explain", True)),
    )  # no stored-failure replay: the tables depend on the config and the dumps alone
