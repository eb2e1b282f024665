"""The CPU default (config.yaml's `light` block): a GPU and `config/config.full.yaml` get the
full setting unchanged; on the CPU it runs a subset of the full setting's cases (the same seeds), every
strategy on the study's cases with the dtypes in turn, and keeps every dtype, value class and layout a
corpus trigger needs within reach; the static study compiles for one arch."""

from __future__ import annotations

from dataclasses import replace

import yaml
from conftest import REPO

from rescore.corpus.catalog import load_corpus
from rescore.engine.plan import plan_cases
from rescore.inputs.strategies import STRATEGIES, get_strategy
from rescore.model.run import DEFAULT_BUDGET
from rescore.model.schema import OpSchema
from rescore.model.settings import effective_config, is_light, merge
from rescore.stages import run_config, static_archs

CONFIG = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
FULL = merge(CONFIG, yaml.safe_load((REPO / "config" / "config.full.yaml").read_text()))
GPU = merge(CONFIG, yaml.safe_load((REPO / "config" / "config.gpu.yaml").read_text()))
SUBS = load_corpus()


def case_keys(plan: list[dict]) -> set[tuple]:
    return {(c["strategy"], c["dtype"], c["case_index"], c["seed"], c["purpose"]) for c in plan}


def test_a_gpu_and_the_full_file_get_the_top_level_setting():
    assert is_light(CONFIG, "cpu") and not is_light(CONFIG, "cuda")
    assert effective_config(CONFIG, "cuda") == CONFIG and effective_config(GPU, "cuda") == GPU
    assert not is_light(FULL, "cpu") and effective_config(FULL, "cpu") == FULL
    on_gpu = run_config(dict(CONFIG, device="cuda"))
    full_on_cpu = run_config(dict(FULL, device="cpu"))
    # the same science; the element and wall-clock budgets are per device
    per_device = {"budget": on_gpu.budget, "submission_budget_s": on_gpu.submission_budget_s}
    assert replace(full_on_cpu, device="cuda", **per_device) == on_gpu
    light = run_config(dict(CONFIG, device="cpu"))
    assert light.dtypes_in_turn and light.strategies != on_gpu.strategies and not on_gpu.dtypes_in_turn
    profile = yaml.safe_load((REPO / "config" / "profiles" / "gpu" / "config.yaml").read_text())
    assert GPU["device"] == "cuda" and "config/config.gpu.yaml" in profile["configfile"]


def test_the_cpu_default_runs_a_subset_of_the_full_settings_cases_with_the_dtypes_in_turn():
    light_cfg = run_config(dict(CONFIG, device="cpu"))
    full_cfg = run_config(dict(FULL, device="cpu"))
    seeds = CONFIG["study"]["seeds"]
    for sub in SUBS:
        light, full = plan_cases(sub, light_cfg), plan_cases(sub, full_cfg)
        assert case_keys(light) <= case_keys(full), sub.name
        runnable = [c for c in full if c["dtype"] != "bfloat16"]  # skipped under the interpreter
        assert len(light) < len(runnable), sub.name
        calibration = [c for c in light if c["purpose"] == "calibration"]
        assert case_keys(calibration) == case_keys([c for c in runnable if c["purpose"] == "calibration"])
        evaluation = [c for c in light if c["purpose"] == "evaluation"]
        for name, count in light_cfg.strategies.items():
            mine = [i for i, c in enumerate(evaluation) if c["strategy"] == name]
            # the study compares strategies on their first `seeds` cases; one with fewer in the full
            # setting (benchmark_shape: the benchmark's own sizes, 2 cases) keeps all of them
            assert len(mine) == count and (count >= seeds or count == full_cfg.strategies[name]), (sub.name, name)
            assert mine == list(range(mine[0], mine[0] + count)), (sub.name, name)  # in a row
            dtypes = list(dict.fromkeys(evaluation[i]["dtype"] for i in mine))
            assert [evaluation[i]["dtype"] for i in mine] == [dtypes[k % len(dtypes)] for k in range(count)]
            if not get_strategy(name).dtypes and set(light_cfg.dtypes) <= set(sub.dtypes or light_cfg.dtypes):
                assert dtypes == list(light_cfg.dtypes), (sub.name, name)  # every dtype, in turn


def drawable(sub, plan: list[dict]) -> set[tuple[str, str, str]]:
    """(dtype, value class, layout) that the plan's evaluation cases can draw for `sub`."""
    schema = OpSchema(dims=(), family=(sub.problem.schema or {}).get("family", ""))
    out = set()
    for case in plan:
        if case["purpose"] != "evaluation":
            continue
        strategy = get_strategy(case["strategy"])
        for part in [STRATEGIES[name] for name, _ in strategy.mix] or [strategy]:
            out |= {(case["dtype"], v, layout) for v in part.value_classes(schema) for layout in part.layouts}
    return out


def test_every_trigger_the_full_setting_can_draw_on_a_cpu_the_cpu_default_can_draw_too():
    light_cfg = run_config(dict(CONFIG, device="cpu"))
    full_cfg = run_config(dict(FULL, device="cpu"))
    triggers = [s for s in SUBS if s.label == "buggy" and s.trigger and s.language != "cuda"
                and s.trigger.get("device") != "cuda" and s.trigger.get("dtype", "float32") != "bfloat16"]
    assert triggers
    for sub in triggers:
        t = sub.trigger
        need = (t.get("dtype", "float32"), t.get("values", "normal"), t.get("layout", "contiguous"))
        if need in drawable(sub, plan_cases(sub, full_cfg)):
            assert need in drawable(sub, plan_cases(sub, light_cfg)), (sub.name, need)


def test_the_static_study_compiles_for_the_first_arch_only_on_the_cpu_by_default():
    def settings(config: dict, device: str) -> dict:
        return {"device": device, **{k: config[k] for k in ("static", "light") if k in config}}

    assert static_archs(settings(CONFIG, "cpu")) == CONFIG["light"]["static"]["archs"]
    assert static_archs(settings(CONFIG, "cpu"))[0] == CONFIG["static"]["archs"][0]  # the papers' arch
    assert static_archs(settings(FULL, "cpu")) == static_archs(settings(CONFIG, "cuda")) == CONFIG["static"]["archs"]


def test_the_configs_element_budgets_are_the_defaults():
    # the science lives in config.yaml; the command line and a bare RunConfig use the same numbers
    assert CONFIG["budget"] == DEFAULT_BUDGET
