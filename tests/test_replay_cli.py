"""`rescore check` (summary, --json, exit codes) and `rescore replay` of a failure it printed."""

import json
import shlex
import subprocess
import sys

from conftest import REPO, TOY


def rescore(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rescore.cli", *args], cwd=REPO, capture_output=True, text=True, timeout=300
    )


def test_check_json_flags_the_illusion_and_replay_reproduces_it(tmp_path):
    out = tmp_path / "check.json"
    r = rescore(
        "check",
        str(TOY / "problem_scale.py"),
        str(TOY / "scale_tail_bug.py"),
        "--device",
        "cpu",
        "--cases",
        "10",
        "--dtypes",
        "float32",
        "--json",
        str(out),
    )
    assert r.returncode == 1, r.stderr
    assert "ILLUSION" in r.stdout
    doc = json.loads(out.read_text())
    assert doc["fixed"]["verdict"] == "pass"
    assert doc["fuzz"]["verdict"] == "flagged" and doc["fuzz"]["cases"] == 10
    failure = doc["fuzz"]["failures"][0]
    assert set(failure) >= {"outcome", "strategy", "seed", "dtype", "shapes", "max_abs_err", "replay"}
    argv = shlex.split(failure["replay"])
    assert argv[:2] == ["rescore", "replay"]
    first = rescore(*argv[1:])
    second = rescore(*argv[1:])
    assert first.returncode == 1
    assert f"outcome: {failure['outcome']}" in first.stdout
    assert first.stdout == second.stdout  # same inputs (hash printed), same outcome, same message


def test_check_exit_codes(tmp_path):
    ok = rescore(
        "check",
        str(TOY / "problem_scale.py"),
        str(TOY / "scale_correct.py"),
        "--device",
        "cpu",
        "--cases",
        "4",
        "--dtypes",
        "float32",
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "cases" not in ok.stderr  # no progress line where stderr is not a terminal
    missing = rescore("check", str(TOY / "nope.py"), str(TOY / "scale_correct.py"))
    assert missing.returncode == 2 and "no such file" in missing.stderr
    usage = rescore("check", str(TOY / "problem_scale.py"))
    assert usage.returncode == 2


def test_a_corpus_pair_replays_with_the_corpus_schema_and_a_half_linear_layer_keeps_its_weights():
    """The pipeline drew this float16 case from linear_gelu's explicit schema (out_features 1) and
    flagged the correct kernel: the truth used the weights unrounded while the kernel got them in
    float16. A replay must draw the same case (not sizes from an inferred schema), and the truth
    now uses the rounded weights."""
    import torch

    from rescore.engine.replay import replay_case
    from rescore.ingest.files import pair_from_files
    from rescore.oracle.reference import round_parameters

    ops = REPO / "src" / "rescore" / "corpus" / "ops" / "linear_gelu"
    sub = pair_from_files(str(ops / "problem.py"), str(ops / "linear_gelu_triton.py"))
    assert sub.problem.schema and sub.problem.problem_id == "corpus/linear_gelu"
    row = replay_case(str(ops / "problem.py"), str(ops / "linear_gelu_triton.py"), "fuzz", "boundary",
                      1932270168089379459, "float16", "cpu")
    assert json.loads(row["sizes"])["out_features"] == 1 and row["inputs_hash"] == "890b7b3f12d51b32"
    assert row["outcome"] == "pass", row.get("reason")
    layer = torch.nn.Linear(5, 3)
    want = layer.weight.detach().half().float()
    assert round_parameters(layer, torch.float16) is layer
    assert layer.weight.dtype == torch.float32 and torch.equal(layer.weight, want)


def test_check_defaults_to_the_pipelines_strategy_mix_scaled_to_the_case_count():
    """`rescore check` runs the strategies study's mix (the pipeline's): 100 cases per dtype by
    default, a single-dtype strategy only when its dtype is asked for; a list shares the count."""
    from rescore.inputs.strategies import STRATEGIES, STUDY, STUDY_MIX, check_mix

    assert set(STUDY_MIX) <= set(STRATEGIES)
    every = check_mix(STUDY, 100, ("float32", "float16", "bfloat16"))
    assert every == STUDY_MIX
    fp32 = check_mix(STUDY, 100, ("float32",))
    assert "single_dtype_fp16" not in fp32 and "single_dtype_bf16" not in fp32
    assert sum(fp32.values()) == 100  # every case of the mix runs at float32
    assert min(check_mix(STUDY, 10, ("float32",)).values()) == 1
    assert check_mix("default,boundary", 100, ("float32",)) == {"default": 50, "boundary": 50}


def test_a_replay_draws_with_the_budget_its_case_was_drawn_with(tmp_path, capsys):
    """A case's sizes depend on the element budget (the GPU's 2^20 draws larger than the CPU's 2^15):
    `rescore replay --budget` re-creates a case drawn past 2^15 elements bit for bit, and a bare
    RunConfig on `cuda` has the budget `rescore check` uses there."""
    from rescore.cli import build_parser
    from rescore.engine.runner import run_submission
    from rescore.engine.sandbox import Worker
    from rescore.ingest.files import pair_from_files
    from rescore.model.run import DEFAULT_BUDGET, RunConfig

    problem = tmp_path / "problem_scale.py"  # the toy problem, larger: its id (the file name) seeds the draws
    problem.write_text((TOY / "problem_scale.py").read_text().replace("batch_size = 8", "batch_size = 64")
                       .replace("dim = 1024", "dim = 4096"))
    sub = pair_from_files(str(problem), str(TOY / "scale_correct.py"))
    budget = DEFAULT_BUDGET["cuda"]
    cfg = RunConfig(strategies={"boundary": 4}, dtypes=("float32",), budget=budget)
    worker = Worker("cpu", budget)
    try:
        rows = run_submission(sub, cfg, worker, fixed=False)
    finally:
        worker.stop()
    large = [r for r in rows if json.loads(r["sizes"])["batch_size"] * json.loads(r["sizes"])["dim"] > 1 << 15]
    assert large, [r["sizes"] for r in rows]  # the case this test is about: past the CPU's budget
    case = large[0]
    args = build_parser().parse_args(["replay", str(problem), str(TOY / "scale_correct.py"), "--strategy", "boundary",
                                      "--seed", str(case["seed"]), "--dtypes", "float32", "--device", "cpu",
                                      "--budget", str(budget)])
    assert args.func(args) == 0
    assert f"inputs_hash: {case['inputs_hash']}" in capsys.readouterr().out
    assert RunConfig(device="cuda").budget == DEFAULT_BUDGET["cuda"] and RunConfig().budget == DEFAULT_BUDGET["cpu"]
