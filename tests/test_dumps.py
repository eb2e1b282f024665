"""Benchmark dumps: the three adapters on their fixtures and on malformed variants, the generated
gpuemu and pairs wrappers run end to end, the rescored and degenerate tables, and the CUDA prebuild."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import types
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import torch
from conftest import REPO

from rescore.engine.check import check_pair
from rescore.engine.runner import RunConfig, run_submission
from rescore.ingest import ADAPTERS, read_dump
from rescore.ingest.annotations import AnnotationError
from rescore.ingest.common import ingest_error
from rescore.ingest.files import pair_from_files
from rescore.model.records import cuda_only
from rescore.runtime.modules import load_module

FIX = REPO / "tests" / "fixtures" / "dumps"
KB = {"format": "kernelbench", "path": str(FIX / "kernelbench")}
EMU = {"format": "gpuemu", "path": str(FIX / "gpuemu"), "labels": {"_buggy$": "buggy", ".*": "correct"}}
EMU_ENTRIES = {"bias_add", "bias_add_buggy", "bias_add_triton", "leaky_relu_triton", "leaky_relu_triton_buggy",
               "softmax", "softmax_llm_buggy"}  # its data/ folders
PAIRS = {
    "format": "pairs",
    "path": str(FIX / "pairs" / "archive.jsonl"),
    "columns": {
        "problem_code": "PyTorch_Code_Module",
        "submission_code": "CUDA_Code",
        "claimed": "Correct",
        "id": ["Level_ID", "Task_ID", "Kernel_Name"],
        "op": "Op_Name",
        "keep": ["Max_Diff"],
    },
}
CUDAL1_JSON = FIX / "cudal1" / "optimized_cuda_code" / "h100_xsm.json"
CUDAL1_DIR = FIX / "cudal1" / "unpacked"


def by_name(subs) -> dict:
    return {s.name: s for s in subs}


def errors(subs) -> dict:
    return {s.name: ingest_error(s) for s in subs if ingest_error(s)}


def copy_fixture(tmp_path: Path, name: str) -> Path:
    dst = tmp_path / name
    shutil.copytree(FIX / name, dst)
    return dst


def test_registry_knows_every_format_the_config_schema_allows():
    import yaml

    schema = yaml.safe_load((REPO / "config" / "config.schema.yaml").read_text())
    formats = schema["properties"]["dumps"]["additionalProperties"]["properties"]["format"]["enum"]
    assert set(formats) <= set(ADAPTERS)


def test_every_example_dump_validates_and_ingests_without_errors():
    import jsonschema
    import yaml

    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["dumps"] = yaml.safe_load((REPO / "config" / "dumps.example.yaml").read_text())["dumps"]
    jsonschema.validate(config, yaml.safe_load((REPO / "config" / "config.schema.yaml").read_text()))
    for name, spec in config["dumps"].items():
        spec = {k: str(REPO / v) if k in ("path", "problems") else v for k, v in spec.items()}
        subs = read_dump(name, spec)
        assert subs and not errors(subs), name


# -- kernelbench ---------------------------------------------------------------------------------


def test_kernelbench_pairs_each_kernel_with_its_problem_and_claim():
    subs = by_name(read_dump("kb", KB))
    assert set(subs) == {
        "demo/level1/19/sample0",
        "demo/level1/19/sample1",
        "demo/level1/19/sample2",
        "demo/level1/23/sample0",
    }
    s = subs["demo/level1/19/sample1"]
    assert s.problem.problem_id == "kb/level1/19" and s.problem.op == "ReLU" and s.dump == "kb"
    assert s.language == "triton" and s.claimed_verdict == "correct" and s.dtypes == ("float32",)
    assert subs["demo/level1/19/sample2"].language == "cuda"
    assert subs["demo/level1/23/sample0"].problem.problem_id == "kb/level1/23"
    assert not errors(subs.values())
    assert s.row()["ingest_error"] is None


def test_kernelbench_problems_from_a_parquet_table(tmp_path):
    rows = [
        {"code": p.read_text(), "level": 1, "name": p.name, "problem_id": int(p.name.split("_")[0])}
        for p in sorted((FIX / "kernelbench" / "KernelBench" / "level1").glob("*.py"))
    ]
    pd.DataFrame(rows).to_parquet(tmp_path / "problems.parquet")
    subs = by_name(read_dump("kb", dict(KB, problems=str(tmp_path / "problems.parquet"))))
    assert len(subs) == 4 and not errors(subs.values())
    assert subs["demo/level1/23/sample0"].problem.op == "Softmax"
    assert Path(subs["demo/level1/23/sample0"].problem.path).read_text() == rows[1]["code"]


def test_kernelbench_runs_and_levels_filter():
    assert read_dump("kb", dict(KB, levels=[2])) == []
    assert len(read_dump("kb", dict(KB, levels=[1], runs=["demo"]))) == 4
    missing = read_dump("kb", dict(KB, runs=["nope"]))
    assert len(missing) == 1 and "does not exist" in ingest_error(missing[0])


def test_kernelbench_malformed_problems_become_error_rows(tmp_path):
    root = copy_fixture(tmp_path, "kernelbench")
    level1 = root / "KernelBench" / "level1"
    (level1 / "23_Softmax.py").write_text("def get_inputs(:\n")
    (level1 / "19_ReLU_copy.py").write_text((level1 / "19_ReLU.py").read_text())
    (root / "runs" / "demo" / "level_1_problem_7_sample_0_kernel.py").write_text("class ModelNew: pass\n")
    subs = read_dump("kb", {"format": "kernelbench", "path": str(root)})
    errs = errors(subs)
    assert len(subs) == 5 and len(errs) == 5
    assert "23_Softmax.py" in errs["demo/level1/23/sample0"] and "syntax error" in errs["demo/level1/23/sample0"]
    assert "duplicate problem id 19" in errs["demo/level1/19/sample0"]
    assert "no problem 7 in level 1" in errs["demo/level1/7/sample0"]
    row = next(s for s in subs if s.name == "demo/level1/23/sample0").row()
    assert row["ingest_error"] == errs["demo/level1/23/sample0"] and len({s.submission_id for s in subs}) == 5


def test_kernelbench_unreadable_eval_results_leave_claims_empty(tmp_path, caplog):
    root = copy_fixture(tmp_path, "kernelbench")
    (root / "runs" / "demo" / "eval_results.json").write_text('{"19": [{"sample_id": 0,')
    subs = read_dump("kb", {"format": "kernelbench", "path": str(root)})
    assert len(subs) == 4 and not errors(subs)
    assert all(s.claimed_verdict is None for s in subs)
    assert "eval_results.json" in subs[0].extra["claim_error"] and "eval_results.json" in caplog.text


@pytest.mark.parametrize("damage", ["truncated", "columns"])
def test_kernelbench_unusable_problem_table_names_the_file(tmp_path, damage):
    table = tmp_path / "problems.parquet"
    pd.DataFrame([{"code": "x = 1", "level": 1, "title": "19_ReLU.py", "problem_id": 19}]).to_parquet(table)
    if damage == "truncated":
        table.write_bytes(table.read_bytes()[:40])
    subs = read_dump("kb", dict(KB, problems=str(table)))
    assert len(subs) == 4
    expected = "not a readable Parquet table" if damage == "truncated" else "lacks columns ['name']"
    assert all(str(table) in ingest_error(s) and expected in ingest_error(s) for s in subs)


def test_kernelbench_pair_runs_under_the_fixed_check(worker):
    """Only the fixed check: the tail bug hides at the benchmark's shape (16 x 1024)."""
    subs = by_name(read_dump("kb", KB))
    cfg = RunConfig(strategies={}, dtypes=("float32",))
    for name in ("demo/level1/19/sample0", "demo/level1/19/sample1"):
        rows = run_submission(subs[name], cfg, worker, cases=[])
        assert rows[0]["oracle"] == "fixed" and rows[0]["outcome"] == "pass", rows[0]


# -- gpuemu --------------------------------------------------------------------------------------


def test_gpuemu_entries_become_kernelbench_problems_with_their_op_schema():
    subs = by_name(read_dump("emu", EMU))
    assert set(subs) == EMU_ENTRIES
    good, bad, gpu = subs["bias_add"], subs["bias_add_buggy"], subs["bias_add_triton"]
    assert (good.label, bad.label, gpu.label) == ("correct", "buggy", "correct")  # from the spec's patterns
    assert good.extra["label_from"] == "config dumps.emu.labels['.*']"
    assert good.claimed_verdict == bad.claimed_verdict == "correct"
    assert good.language == "numpy" and good.dtypes == ("float32", "float16")
    # one reference script, one op, one problem: the buggy entry and the GPU control name bias_add's
    assert good.problem.problem_id == bad.problem.problem_id == gpu.problem.problem_id == "gpuemu/bias_add"
    assert good.extra["reference_modules"] == ["_helperkit"]
    assert good.problem.schema["dims"] == {"rows": [2, 8], "cols": [48, 200]}
    assert good.problem.schema["candidates"]["cols"] == [64, 48, 200]
    assert good.problem.size_names() == ["rows", "cols"]
    assert good.problem.tolerance == {"float32": {"atol": 1e-5}, "float16": {"atol": 1e-3}}
    # no input names a domain: each is real-valued, said explicitly so that no draw restricts it
    assert good.problem.schema["inputs"] == {
        "x": {"domain": "real", "note": "gpuemu op_schema names no domain for 'x': real-valued"},
        "bias": {"domain": "real", "note": "gpuemu op_schema names no domain for 'bias': real-valued"}}
    leaky = subs["leaky_relu_triton_buggy"]
    assert leaky.extra["reference_modules"] == ["_refkit"] and leaky.problem.problem_id == "gpuemu/leaky_relu_triton"
    assert Path(good.path).read_text() == good.source  # materialised: `rescore replay` can read it
    assert cuda_only(gpu.source) and not cuda_only(good.source) and not cuda_only(bad.source)


def _reference(sub):
    """The generated problem's float64 reference (run in this process) and its input factory."""
    module = load_module(sub.problem.source, sub.problem.path, "problem")
    return module.Model(*module.get_init_inputs()), module.get_inputs


def test_gpuemu_reference_imports_its_corpus_helper_through_file_without_the_dump(tmp_path):
    """The problem embeds the script and `_helperkit.py` and lays them out as in data/: it runs with
    the dump gone, and leaves sys.path and sys.modules as it found them."""
    root = copy_fixture(tmp_path, "gpuemu")
    sub = by_name(read_dump("emu", {"format": "gpuemu", "path": str(root)}))["bias_add_buggy"]
    shutil.rmtree(root)
    path = list(sys.path)
    model, get_inputs = _reference(sub)
    x, bias = get_inputs()
    assert torch.equal(model(x, bias), (x.double() + bias.double()).float())
    assert sys.path == path and "_helperkit" not in sys.modules


def test_gpuemu_helpers_of_two_corpora_never_mix(tmp_path, monkeypatch):
    """Two corpora whose `_helperkit` differ, referenced in one process: each script gets its own,
    and a module of that name imported by anything else is neither used nor lost."""
    elsewhere = types.ModuleType("_helperkit")
    monkeypatch.setitem(sys.modules, "_helperkit", elsewhere)
    root = copy_fixture(tmp_path, "gpuemu")
    other = tmp_path / "other"
    shutil.copytree(root, other)
    helper = other / "data" / "_helperkit.py"
    helper.write_text(helper.read_text().replace("array = np.ascontiguousarray(array)",
                                                 "array = np.ascontiguousarray(array * 2)"))
    first = by_name(read_dump("a", {"format": "gpuemu", "path": str(root)}))["bias_add"]
    second = by_name(read_dump("b", {"format": "gpuemu", "path": str(other)}))["bias_add"]
    assert first.problem.source != second.problem.source  # the helper is part of the problem
    (one, get_inputs), (two, _) = _reference(first), _reference(second)
    x, bias = get_inputs()
    for _ in range(2):  # alternating: neither run leaves its helper for the other
        assert torch.equal(one(x, bias), x + bias) and torch.equal(two(x, bias), 2 * (x + bias))
    assert sys.modules["_helperkit"] is elsewhere


def test_gpuemu_labels_come_from_the_spec_or_meta_json_never_from_names(tmp_path):
    root = copy_fixture(tmp_path, "gpuemu")
    plain = by_name(read_dump("emu", {"format": "gpuemu", "path": str(root)}))
    assert {s.label for s in plain.values()} == {"unknown"}  # `_buggy` in a name is not a label
    table = {"bias_add_triton": "unknown", "_buggy$": "buggy", "bias": "correct"}  # exact names first
    subs = by_name(read_dump("emu", {"format": "gpuemu", "path": str(root), "labels": table}))
    assert {n: s.label for n, s in subs.items()} == {
        "bias_add": "correct", "bias_add_buggy": "buggy", "bias_add_triton": "unknown", "softmax": "unknown",
        "softmax_llm_buggy": "buggy", "leaky_relu_triton": "unknown", "leaky_relu_triton_buggy": "buggy"}
    assert subs["bias_add_triton"].extra["label_from"] == "config dumps.emu.labels['bias_add_triton']"
    meta_file = root / "data" / "bias_add_buggy" / "meta.json"
    meta_file.write_text(json.dumps(dict(json.loads(meta_file.read_text()), label="correct")))
    subs = by_name(read_dump("emu", {"format": "gpuemu", "path": str(root), "labels": table}))
    assert subs["bias_add_buggy"].label == "correct"  # the dump's own label wins
    assert subs["bias_add_buggy"].extra["label_from"].endswith("meta.json label")


@pytest.mark.parametrize(
    "key, table, expected",
    [
        ("labels", {"(unclosed": "buggy"}, "neither an entry name nor a valid regular expression"),
        ("labels", {"_buggy$": "wrong"}, "is not one of correct, buggy, unknown"),
        ("labels", ["_buggy$"], "must map entry names or patterns"),
        ("controls", {"^(.+)_buggy$": "\\2"}, "does not fit its match on 'bias_add_buggy'"),
        ("controls", {"_buggy$": "nowhere"}, "names 'nowhere' as the control of 'bias_add_buggy'"),
    ],
)
def test_unusable_labels_or_controls_stop_the_ingest_naming_the_key(key, table, expected):
    with pytest.raises(AnnotationError, match="dump 'emu'") as err:
        read_dump("emu", dict(EMU, **{key: table}))
    assert expected in str(err.value)


def test_gpuemu_controls_from_the_spec():
    """As the real corpus needs it (docs/dumps.md): `softmax_llm_buggy` was seeded from `softmax`, which
    the pattern alone would name `softmax_llm`, so its exact entry comes first."""
    controls = {"softmax_llm_buggy": "softmax", "^(.+)_buggy$": "\\1"}
    subs = by_name(read_dump("emu", dict(EMU, controls=controls)))
    assert subs["bias_add_buggy"].control == "bias_add" and subs["bias_add"].control is None
    assert subs["bias_add_buggy"].extra["control_from"] == "config dumps.emu.controls['^(.+)_buggy$']"
    assert subs["softmax_llm_buggy"].control == "softmax"
    assert subs["softmax_llm_buggy"].extra["control_from"] == "config dumps.emu.controls['softmax_llm_buggy']"
    with pytest.raises(AnnotationError, match="names 'softmax_llm' as the control of 'softmax_llm_buggy'"):
        read_dump("emu", dict(EMU, controls={"^(.+)_buggy$": "\\1"}))


def _break_meta(meta: dict, how: str) -> dict:
    if how == "undeclared_dim":
        meta["op_schema"]["inputs"][1]["dims"] = ["k"]
    elif how == "input_names":
        meta["input_names"] = ["x", "b"]
    elif how == "no_candidates":
        meta["op_schema"]["dims"][0]["candidates"] = []
    elif how == "reference":
        meta["reference"] = "nowhere/ref_fp64.py"
    elif how == "label":
        meta["label"] = "probably"
    elif how == "requires_gpu":
        meta["requires_gpu"] = "yes"
    elif how == "domain":
        meta["op_schema"]["inputs"][0]["domain"] = "imaginary"
    return meta


@pytest.mark.parametrize(
    "how, expected",
    [
        ("missing_meta", "meta.json: missing"),
        ("bad_json", "unreadable JSON"),
        ("missing_kernel", "kernel file 'bias_add_buggy/kernel.py' not found"),
        ("undeclared_dim", "undeclared dim 'k'"),
        ("input_names", "do not match op_schema inputs"),
        ("no_candidates", "positive int candidates"),
        ("reference", "reference file 'nowhere/ref_fp64.py' not found"),
        ("label", "label 'probably' is not one of correct, buggy, unknown"),
        ("requires_gpu", "requires_gpu must be true or false"),
        ("domain", "op_schema input 'x' has domain 'imaginary', not one of real, positive, unit"),
    ],
)
def test_gpuemu_malformed_entry_is_an_error_row_naming_the_file(tmp_path, how, expected):
    root = copy_fixture(tmp_path, "gpuemu")
    entry = root / "data" / "bias_add_buggy"
    if how == "missing_meta":
        (entry / "meta.json").unlink()
    elif how == "bad_json":
        (entry / "meta.json").write_text("{not json")
    elif how == "missing_kernel":
        (entry / "kernel.py").unlink()
    else:
        (entry / "meta.json").write_text(json.dumps(_break_meta(json.loads((entry / "meta.json").read_text()), how)))
    subs = read_dump("emu", {"format": "gpuemu", "path": str(root)})
    errs = errors(subs)
    assert len(subs) == len(EMU_ENTRIES) and list(errs) == ["bias_add_buggy"]
    assert "bias_add_buggy" in errs["bias_add_buggy"] and expected in errs["bias_add_buggy"]


def test_gpuemu_helper_with_a_syntax_error_is_an_error_row_of_every_entry_using_it(tmp_path):
    root = copy_fixture(tmp_path, "gpuemu")
    (root / "data" / "_helperkit.py").write_text("def broken(:\n")
    errs = errors(read_dump("emu", {"format": "gpuemu", "path": str(root)}))
    assert set(errs) == EMU_ENTRIES - {"leaky_relu_triton", "leaky_relu_triton_buggy"}  # those use _refkit.py
    assert all("_helperkit.py: syntax error at line 1" in e for e in errs.values())


def test_gpuemu_duplicate_entry_names(tmp_path):
    root = copy_fixture(tmp_path, "gpuemu")
    shutil.copytree(root / "data" / "bias_add", root / "data" / "bias_add_again")
    subs = read_dump("emu", {"format": "gpuemu", "path": str(root)})
    assert len(subs) == len(EMU_ENTRIES) + 1 and "duplicate entry name 'bias_add'" in list(errors(subs).values())[0]


def test_gpuemu_generated_entries_run_the_buggy_kernel_is_flagged_the_gpu_one_skipped(worker):
    subs = by_name(read_dump("emu", EMU))
    cfg = RunConfig(strategies={"default": 4, "boundary": 4}, dtypes=("float32", "float16"))
    good = run_submission(subs["bias_add"], cfg, worker)
    assert Counter(r["outcome"] for r in good) == {"pass": 17}
    bad = run_submission(subs["bias_add_buggy"], cfg, worker)
    assert bad[0]["oracle"] == "fixed" and bad[0]["outcome"] == "pass"  # 64 columns: a multiple of 32
    fuzz = Counter(r["outcome"] for r in bad if r["oracle"] == "fuzz")
    assert fuzz["mismatch"] >= 8, fuzz
    gpu = run_submission(subs["bias_add_triton"], cfg, worker)  # this worker has no CUDA
    assert len(gpu) == 17 and {r["outcome"] for r in gpu} == {"skipped"}
    assert {r["reason"] for r in gpu} == {
        "bias_add_triton: its dump says this kernel runs only with CUDA (gpuemu meta.json `requires_gpu`); "
        "run on a CUDA device"}


def test_gpuemu_leaky_relu_slope_bug_in_the_real_layout_is_flagged_on_the_cpu(worker):
    """The corpus's leaky_relu pair in its real layout (numpy stand-ins for the Triton kernels): the
    generated problem's own sizes are the first candidates (1, 1, 1), so one draw of its input is one
    element. Its domain is real (gpuemu's op schema names none), never |x| from that draw, so negative
    inputs reach the kernel and the slope bug (0.1 for 0.01) shows; the control passes throughout."""
    subs = by_name(read_dump("emu", EMU))
    assert subs["leaky_relu_triton_buggy"].problem.schema["dims"] == {"B": [1, 8], "S": [1, 128], "H": [1, 1025]}
    cfg = RunConfig(strategies={"default": 4, "boundary": 4}, dtypes=("float32", "float16"))
    good = run_submission(subs["leaky_relu_triton"], cfg, worker)
    assert Counter(r["outcome"] for r in good) == {"pass": 17}
    bad = [r for r in run_submission(subs["leaky_relu_triton_buggy"], cfg, worker) if r["oracle"] == "fuzz"]
    assert {r["outcome"] for r in bad} == {"mismatch"}, Counter(r["outcome"] for r in bad)
    (domains,) = {r["input_domains"] for r in bad}
    assert [(d["input"], d["domain"], d["from"]) for d in json.loads(domains)] == [("in_input", "real", "schema")]


def test_rescore_check_on_generated_files_skips_a_cuda_only_kernel_on_cpu():
    gpu = by_name(read_dump("emu", EMU))["bias_add_triton"]
    sub = pair_from_files(gpu.problem.path, gpu.path)  # what `rescore check PROBLEM KERNEL` reads
    doc, rows = check_pair(sub, RunConfig(strategies={"default": 2}, dtypes=("float32",)))
    assert {r["outcome"] for r in rows} == {"skipped"} and "runs only with CUDA" in rows[0]["reason"]
    assert doc["fixed"]["verdict"] == doc["fuzz"]["verdict"] == "skipped"


# -- pairs ---------------------------------------------------------------------------------------


def test_pairs_rows_become_submissions_wrapping_functions_and_cuda():
    subs = by_name(read_dump("arch", PAIRS))
    assert set(subs) == {"1/19/relu_torch", "1/90/scale_fn", "1/19/relu_cuda"}
    assert [subs[n].extra["wrapped"] for n in subs] == ["as_is", "function", "cuda"]
    assert subs["1/19/relu_cuda"].language == "cuda" and "load_inline" in subs["1/19/relu_cuda"].source
    assert subs["1/19/relu_torch"].problem is subs["1/19/relu_cuda"].problem  # same reference code, one problem
    assert subs["1/90/scale_fn"].problem.problem_id == "arch/Scale"
    assert all(s.claimed_verdict == "correct" for s in subs.values())
    assert subs["1/19/relu_cuda"].extra["Max_Diff"] == pytest.approx(1.2e-7)


def test_pairs_parquet_table_reads_the_same(tmp_path):
    rows = [json.loads(line) for line in (FIX / "pairs" / "archive.jsonl").read_text().splitlines()]
    pd.DataFrame(rows).to_parquet(tmp_path / "archive.parquet")
    subs = read_dump("arch", dict(PAIRS, path=str(tmp_path / "archive.parquet")))
    assert [s.submission_id for s in subs] == [s.submission_id for s in read_dump("arch", PAIRS)]


def test_pairs_malformed_tables_and_rows(tmp_path):
    lines = (FIX / "pairs" / "archive.jsonl").read_text().splitlines()
    table = tmp_path / "t.jsonl"
    other = json.loads(lines[0])
    other["CUDA_Code"], other["Kernel_Name"] = "print('no model here')\n", "other"
    table.write_text("\n".join([lines[0], "{broken", lines[0], json.dumps(other)]) + "\n")
    errs = errors(read_dump("arch", dict(PAIRS, path=str(table))))
    assert "line 2" in errs["row1"] and "not valid JSON" in errs["row1"]
    assert "duplicate id '1/19/relu_torch'" in errs["1/19/relu_torch"]
    assert "neither ModelNew nor a function named forward or module_fn" in errs["1/19/other"]
    assert len(errs) == 3
    no_col = read_dump("arch", dict(PAIRS, columns=dict(PAIRS["columns"], claimed="Verdict")))
    assert len(no_col) == 1 and "no column(s) ['Verdict']" in ingest_error(no_col[0])
    bad = tmp_path / "t.parquet"
    bad.write_bytes(b"PAR1 truncated")
    trunc = read_dump("arch", dict(PAIRS, path=str(bad)))
    assert len(trunc) == 1 and str(bad) in ingest_error(trunc[0])


def test_pairs_submission_with_neither_modelnew_nor_function(tmp_path):
    row = json.loads((FIX / "pairs" / "archive.jsonl").read_text().splitlines()[0])
    row["CUDA_Code"] = "import torch\n\ndef helper(x):\n    return x\n"
    (tmp_path / "t.jsonl").write_text(json.dumps(row) + "\n")
    [sub] = read_dump("arch", dict(PAIRS, path=str(tmp_path / "t.jsonl")))
    assert "defines neither ModelNew nor a function named forward or module_fn" in ingest_error(sub)
    [named] = read_dump("arch", dict(PAIRS, path=str(tmp_path / "t.jsonl"), function="helper"))
    assert ingest_error(named) is None and named.extra["wrapped"] == "function"


def test_pairs_wrappers_run_and_cuda_is_skipped_on_cpu(worker):
    subs = by_name(read_dump("arch", PAIRS))
    cfg = RunConfig(strategies={"default": 2}, dtypes=("float32",))
    for name in ("1/19/relu_torch", "1/90/scale_fn"):  # scale_fn takes the reference's weight as an argument
        assert Counter(r["outcome"] for r in run_submission(subs[name], cfg, worker)) == {"pass": 3}, name
    cuda = run_submission(subs["1/19/relu_cuda"], cfg, worker)
    assert {r["outcome"] for r in cuda} == {"skipped"}


def test_error_rows_survive_the_manifest_and_are_never_a_verdict(tmp_path, worker):
    from rescore.model.records import submission_from_dict
    from rescore.stages import ingest

    root = copy_fixture(tmp_path, "gpuemu")
    (root / "data" / "bias_add_buggy" / "kernel.py").unlink()
    ingest("emu", {"format": "gpuemu", "path": str(root)}, str(tmp_path / "s.parquet"), str(tmp_path / "m.json"))
    table = pd.read_parquet(tmp_path / "s.parquet")
    assert table["ingest_error"].notna().sum() == 1
    broken = [submission_from_dict(d) for d in json.loads((tmp_path / "m.json").read_text())]
    broken = [s for s in broken if ingest_error(s)]
    rows = run_submission(broken[0], RunConfig(strategies={"default": 1}, dtypes=("float32",)), worker)
    assert {r["outcome"] for r in rows} == {"skipped"} and "rescore ingest error" in rows[0]["reason"]


# -- cudal1 --------------------------------------------------------------------------------------


def test_cudal1_json_and_unpacked_folders_read_the_same_claimed_correct_float32_submissions():
    from_json = read_dump("l1", {"format": "cudal1", "path": str(CUDAL1_JSON)})
    from_dirs = read_dump("l1", {"format": "cudal1", "path": str(CUDAL1_DIR), "gpu": "h100_xsm"})
    assert [s.name for s in from_json] == ["level1/task28", "level1/task47", "level2/task9", "level2/task21"]
    assert [(s.name, s.submission_id) for s in from_dirs] == [(s.name, s.submission_id) for s in from_json]
    assert not errors(from_json) and not errors(from_dirs)
    for s in from_json:
        assert (s.claimed_verdict, s.dtypes, s.dump) == ("correct", ("float32",), "l1")
        assert s.problem.problem_id == f"cudal1/{s.name}" and s.extra["wrapped"] == "as_is"
    assert [s.language for s in from_json] == ["torch", "torch", "torch", "cuda"]
    task47 = by_name(from_dirs)["level1/task47"]  # the folder layout keeps the files themselves
    assert task47.path.endswith("1/47/custom_code.py") and task47.problem.path.endswith("1/47/ref_code.py")
    level2 = read_dump("l1", {"format": "cudal1", "path": str(CUDAL1_DIR / "h100_xsm"), "levels": [2]})
    assert [s.name for s in level2] == ["level2/task9", "level2/task21"]
    half = read_dump("l1", {"format": "cudal1", "path": str(CUDAL1_JSON), "dtypes": ["fp16", "float32"]})
    assert half[0].dtypes == ("float16", "float32")


def test_cudal1_entries_keeps_only_the_submissions_named():
    for path in (CUDAL1_JSON, CUDAL1_DIR / "h100_xsm"):
        some = read_dump("l1", {"format": "cudal1", "path": str(path), "entries": ["level1/task47", "level2/task21"]})
        assert [s.name for s in some] == ["level1/task47", "level2/task21"] and not errors(some)


def test_cudal1_malformed_entries_are_error_rows_and_the_rest_is_read(tmp_path):
    data = json.loads(CUDAL1_JSON.read_text())
    good = data["1"][0]
    data["1"] += [
        dict(good),  # the same task again
        {"task_id": "x1", "ref_code": good["ref_code"], "custom_code": good["custom_code"]},
        {"task_id": 90, "ref_code": "class Model:\n    pass\n", "custom_code": good["custom_code"]},
        {"task_id": 91, "ref_code": good["ref_code"], "custom_code": "import torch\n"},
        {"task_id": 92, "ref_code": good["ref_code"], "custom_code": ""},
        "not an entry",
    ]
    data["3"] = {"task_id": 1}
    data["four"] = []
    (tmp_path / "gpu.json").write_text(json.dumps(data))
    subs = read_dump("l1", {"format": "cudal1", "path": str(tmp_path), "gpu": "gpu"})
    errs = errors(subs)
    assert "duplicate task level1/task28" in errs["level1/task28"]
    assert "entry 3" in errs["level1/entry3"] and "task_id 'x1' is not a number" in errs["level1/entry3"]
    assert "ref_code: defines no get_inputs, get_init_inputs" in errs["level1/task90"]
    assert "custom_code: submission code defines neither ModelNew" in errs["level1/task91"]
    assert "empty custom_code" in errs["level1/task92"]
    assert "expected an object, found str" in errs["level1/entry7"]
    assert "expected a list of entries, found dict" in errs["level3/*"]
    assert "the level key is not a number" in errs["levelfour/*"]
    assert all(str(tmp_path / "gpu.json") in e for e in errs.values())
    assert len(errs) == 8 and len(subs) == len(errs) + 4  # the four good entries are still read

    folders = tmp_path / "unpacked"
    shutil.copytree(CUDAL1_DIR / "h100_xsm", folders)
    (folders / "2" / "9" / "custom_code.py").unlink()
    (folders / "2" / "draft").mkdir()
    errs = errors(read_dump("l1", {"format": "cudal1", "path": str(folders)}))
    assert errs == {
        "level2/task9": f"{folders / '2' / '9'}: no custom_code.py (each task folder holds ref_code.py and "
        "custom_code.py)",
        "level2/draft": f"{folders / '2' / 'draft'}: folder name is not a task number",
    }
    (tmp_path / "broken.json").write_text('{"1": [')
    for spec, why in (
        ({"path": str(tmp_path / "broken.json")}, "not valid JSON"),
        ({"path": str(tmp_path / "missing.json")}, "does not exist"),
        ({"path": str(CUDAL1_DIR)}, "name one with `gpu:`"),
        ({"path": str(CUDAL1_DIR), "gpu": "a100"}, "no a100/ or a100.json here (it holds ['h100_xsm'])"),
        ({"path": str(CUDAL1_JSON), "gpu": "h100_xsm"}, "picks a GPU in a folder, but this is a file"),
    ):
        [row] = read_dump("l1", dict(spec, format="cudal1"))
        assert why in ingest_error(row) and spec["path"] in ingest_error(row)


def test_cudal1_submissions_run_on_the_cpu_and_cuda_is_skipped(worker):
    subs = by_name(read_dump("l1", {"format": "cudal1", "path": str(CUDAL1_JSON)}))
    cfg = RunConfig(strategies={"default": 2}, dtypes=("float32",))
    for name in ("level1/task28", "level1/task47", "level2/task9"):
        assert Counter(r["outcome"] for r in run_submission(subs[name], cfg, worker)) == {"pass": 3}, name
    assert {r["outcome"] for r in run_submission(subs["level2/task21"], cfg, worker)} == {"skipped"}


# -- rescored and degenerate tables --------------------------------------------------------------


def test_rescored_table_counts_claims_reproductions_and_illusions():
    from rescore.analysis.rescored import rescored_table

    subs = pd.DataFrame(
        [
            {"submission_id": f"s{i}", "dump": d, "problem_id": p, "claimed_verdict": c, "ingest_error": e}
            for i, (d, p, c, e) in enumerate(
                [
                    ("kb", "p1", "correct", None),
                    ("kb", "p1", "correct", None),
                    ("kb", "p2", "correct", None),
                    ("kb", "p2", "incorrect", None),
                    ("kb", "p3", "correct", None),
                    ("kb", "p3", None, "bad file"),
                    ("emu", "q", None, None),
                    ("emu", "q", None, None),
                ]
            )
        ]
    )
    cols = ["submission_id", "fixed_verdict", "fuzz_verdict", "first_failure_outcome", "diagnosis"]
    ill = pd.DataFrame(
        [
            ("s0", "pass", "flagged", "mismatch", "tail_region"),
            ("s1", "pass", "pass", None, None),
            ("s2", "fail", "flagged", "nonfinite", "nonfinite_leak"),
            ("s3", "fail", "flagged", "crash", None),
            ("s4", "skipped", "skipped", None, None),
            ("s6", "pass", "flagged", "mismatch", "tail_region"),
            ("s7", "fail", "flagged", "mismatch", None),
        ],
        columns=cols,
    )
    degenerate = pd.DataFrame(
        {"problem_id": ["p1", "p2", "q"], "degenerate": pd.array([True, False, None], dtype="boolean")}
    )
    t = rescored_table(ill, subs, degenerate).set_index("dump")
    kb = t.loc["kb"]
    assert (kb.n_submissions, kb.ingest_errors, kb.claimed_known, kb.claimed_correct) == (6, 1, 5, 4)
    assert (kb.reproduced_correct, kb.claimed_correct_reproduced, kb.fuzz_flagged, kb.fuzz_evaluated) == (2, 2, 3, 4)
    assert (kb.basis, kb.illusion_n, kb.illusion_k) == ("claimed", 3, 2)  # s4 never ran: not in the denominator
    assert kb.illusion_lo < 2 / 3 < kb.illusion_hi and kb.on_degenerate == 2
    assert (kb.first_mismatch, kb.first_nonfinite, kb.first_crash) == (1, 1, 0)
    assert json.loads(kb.by_diagnosis) == {"nonfinite_leak": 1, "tail_region": 1}
    emu = t.loc["emu"]  # no claims in this dump: rescore's copy of the check stands in
    assert (emu.basis, emu.illusion_n, emu.illusion_k, emu.on_degenerate) == ("fixed", 1, 1, 0)
    assert t.loc["all"].n_submissions == 8 and t.loc["all"].basis == "mixed"


def test_degenerate_problems_zeros_pass_a_long_softmax_but_not_relu():
    from rescore.engine.degenerate import degenerate_table

    problems = {s.problem.problem_id: s.problem for s in read_dump("kb", KB)}
    df = degenerate_table([("kb", problems["kb/level1/23"]), ("kb", problems["kb/level1/19"])], RunConfig())
    soft, relu = df.iloc[0], df.iloc[1]
    assert soft.problem_id == "kb/level1/23" and soft.zeros == "pass" and bool(soft.degenerate)
    assert "zeros" in soft.passing_nulls and soft.input == "fail"
    assert relu.problem_id == "kb/level1/19" and not bool(relu.degenerate)
    assert {relu[k] for k in ("zeros", "mean", "input", "noise")} == {"fail"}


STAND_IN = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        {body}


def get_inputs():
    return [torch.randn(16, 32)]


def get_init_inputs():
    return []
"""
STAND_INS = {
    "zeros": "return torch.zeros_like(x)",  # zeros, the mean (0) and noise of scale 0 pass; the input fails
    "row_sum": "return x.sum(dim=1)",  # no input of the output's shape: `input` does not apply
    "pair": "return x, x",  # no single tensor output: no null applies
    "raises": "raise RuntimeError('the reference itself is broken')",
}


def stand_in_problems(tmp_path, names):
    from rescore.model.records import Problem

    problems = []
    for name in names:
        path = tmp_path / f"{name}.py"
        path.write_text(STAND_IN.format(body=STAND_INS[name]))
        problems.append(("stand-in", Problem(problem_id=f"stand-in/{name}", source=path.read_text(), path=str(path),
                                             op=name)))
    return problems


def test_a_problems_four_nulls_cost_one_load_and_a_known_null_passes(tmp_path, monkeypatch):
    from rescore.engine import degenerate
    from rescore.engine.sandbox import Worker

    workers = []

    class Counted(Worker):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            workers.append(self)

    monkeypatch.setattr(degenerate, "Worker", Counted)
    df = degenerate.degenerate_table(stand_in_problems(tmp_path, ["zeros", "row_sum", "pair"]), RunConfig())
    assert len(workers) == 1 and (workers[0].starts, workers[0].loads) == (1, 3)  # one load a problem
    zeros, row_sum, pair = (df.iloc[k] for k in range(3))
    assert [zeros[k] for k in ("zeros", "mean", "input", "noise")] == ["pass", "pass", "fail", "pass"]
    assert zeros.passing_nulls == "zeros,mean,noise" and bool(zeros.degenerate) and zeros.reason is None
    assert zeros.zeros_max_diff == 0.0 and zeros.input_max_diff > 1.0
    assert row_sum.input == "n/a" and pd.isna(row_sum.input_max_diff) and not bool(row_sum.degenerate)
    assert {row_sum[k] for k in ("zeros", "mean", "noise")} == {"fail"}
    assert {pair[k] for k in ("zeros", "mean", "input", "noise")} == {"n/a"} and not bool(pair.degenerate)


def test_a_problem_whose_reference_raises_is_no_nulls_verdict(tmp_path):
    from rescore.engine.degenerate import degenerate_table

    row = degenerate_table(stand_in_problems(tmp_path, ["raises"]), RunConfig()).iloc[0]
    assert pd.isna(row.degenerate) and row.passing_nulls == ""
    assert {row[k] for k in ("zeros", "mean", "input", "noise")} == {"skipped"}
    assert str(tmp_path / "raises.py") in row.reason and "the reference itself is broken" in row.reason


def test_each_problem_s_nulls_are_owned_by_the_shard_of_its_first_submission():
    from rescore.engine import degenerate

    subs = read_dump("kb", KB)
    subs = subs + [replace(s, source=s.source + "\n# again\n") for s in subs]  # two per problem
    problems = [p.problem_id for _, p in degenerate.problems_of(subs)]
    assert problems == list(dict.fromkeys(s.problem.problem_id for s in subs))
    # the second submission of each problem in another shard than its first
    first = {s.submission_id for s in degenerate.first_submissions(subs)}
    assignment = {s.submission_id: (0 if s.submission_id in first else 1) for s in subs}
    assert [p.problem_id for _, p in degenerate.owned_problems(subs, assignment, 0)] == problems
    assert degenerate.owned_problems(subs, assignment, 1) == []
    assignment = {s.submission_id: k % 3 for k, s in enumerate(subs)}
    owned = [p.problem_id for k in range(3) for _, p in degenerate.owned_problems(subs, assignment, k)]
    assert sorted(owned) == sorted(problems)  # every problem once, whatever the dealing


def test_the_check_shards_of_a_dump_run_each_problem_s_nulls_once(tmp_path):
    """`rule check_shard`: each shard runs, in its worker after its submissions, the null candidates of
    the problems whose first submission it runs; gathered, every problem has one row."""
    from conftest import toy_submission

    from rescore.model.records import submission_to_dict
    from rescore.stages import concat_tables, run_shard

    subs = [toy_submission("problem_scale.py", name, dtypes=("float32",))
            for name in ("torch_correct.py", "scale_tail_bug.py", "scale_correct.py")]
    manifest = tmp_path / "ingest" / "toy" / "manifest.json"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps([submission_to_dict(s) for s in subs]))
    config = {"device": "cpu", "fixed": {"profile": "kernelbench-v0.1", "dtype": "float32"},
              "fuzz": {"dtypes": ["float32"], "strategies": {"default": 1}}, "budget": {"cpu": 4096}, "timeout_s": 60}
    outs = [str(tmp_path / f"degenerate-{k}.parquet") for k in range(2)]
    for shard, out in enumerate(outs):
        run_shard(str(manifest), shard, 2, config, str(tmp_path / f"cases-{shard}.parquet"),
                  str(tmp_path / f"shrunk-{shard}.parquet"), str(tmp_path / "logs"), out_degenerate=out)
    assert sorted(len(pd.read_parquet(o)) for o in outs) == [0, 1]  # one problem, in one shard
    concat_tables(outs, None, str(tmp_path / "degenerate.parquet"))
    table = pd.read_parquet(tmp_path / "degenerate.parquet")
    assert list(table["problem_id"]) == ["toy/problem_scale"] and not table["degenerate"].iloc[0]


# -- CUDA prebuild -------------------------------------------------------------------------------


def test_cuda_prebuild_without_a_gpu_marks_every_cuda_submission_skipped(tmp_path):
    from rescore.engine.cuda_build import prebuild

    subs = read_dump("kb", KB) + read_dump("arch", PAIRS)
    df = prebuild(subs, "cpu", tmp_path)
    assert sorted(df["name"]) == ["1/19/relu_cuda", "demo/level1/19/sample2"]
    assert set(df["status"]) == {"skipped"} and df["error"].str.contains("no GPU").all()
    assert not any(tmp_path.iterdir())


def test_extension_folders_are_per_source_so_equal_names_never_collide(tmp_path, monkeypatch):
    from rescore.runtime.extensions import extensions_dir
    from rescore.worker.prebuilt import activate

    a = 'load_inline(name="ext", cpp_sources="int f() { return 1; }")'
    b = 'load_inline(name="ext", cpp_sources="int f() { return 2; }")'
    assert extensions_dir(a, tmp_path) != extensions_dir(b, tmp_path)
    assert extensions_dir(a, tmp_path) == extensions_dir(a, tmp_path)
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "before"))  # restored after the test
    from torch.utils import cpp_extension

    cpp_extension.JIT_EXTENSION_VERSIONER.entries["ext"] = ("stale", 0)
    folder = activate(b, tmp_path)
    import os

    assert os.environ["TORCH_EXTENSIONS_DIR"] == str(folder) and folder.parent == tmp_path.resolve()
    assert "ext" not in cpp_extension.JIT_EXTENSION_VERSIONER.entries


def test_a_prebuilt_load_inline_call_imports_its_library_and_any_other_call_builds(tmp_path, monkeypatch):
    """The worker's `load_inline` imports what the prebuild compiled for the very same call (sources
    and flags; `verbose` aside) and builds anything else, as torch would."""
    from torch.utils import cpp_extension

    from rescore.runtime import extensions
    from rescore.worker import prebuilt
    from rescore.worker.turns import Turns

    built, imported = [], []

    def fake_load_inline(name, cpp_sources, cuda_sources=None, functions=None, extra_cuda_cflags=None,
                         build_directory=None, verbose=False, is_python_module=True):
        built.append((name, turns.compiles))  # inside a call (a build on first use): the compiler's turn
        return "built"

    monkeypatch.setattr(cpp_extension, "load_inline", fake_load_inline)
    monkeypatch.setattr(cpp_extension, "_import_module_from_library",
                        lambda module, path, is_python: imported.append((module, path, is_python)) or "prebuilt")
    monkeypatch.setattr(prebuilt.PrebuiltState, "active", None)
    turns, notes = Turns(), []
    turns.begin(notes.append)
    monkeypatch.setattr(prebuilt.PrebuiltState, "turns", turns)
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "before"))
    source = "a CUDA submission's source"
    library = extensions.extensions_dir(source, tmp_path) / "ext"
    library.mkdir(parents=True)
    (library / "ext.so").write_bytes(b"")
    call = (("ext", "int f();"), {"cuda_sources": "__global__ void k() {}"})
    record = {"ok": True, "key": extensions.build_key(), "extensions": ["ext"],
              "calls": [["ext", extensions.call_fingerprint(fake_load_inline, *call), "ext"]]}
    (library.parent / extensions.MARKER).write_text(json.dumps(record))

    prebuilt.activate(source, tmp_path)
    assert cpp_extension.load_inline(*call[0], verbose=True, **call[1]) == "prebuilt"
    assert built == [] and imported == [("ext", str(library), True)]
    assert cpp_extension.load_inline("ext", "int g();", cuda_sources="__global__ void k() {}") == "built"
    assert cpp_extension.load_inline(*call[0], extra_cuda_cflags=["-O3"], **call[1]) == "built"
    (library / "ext.so").unlink()
    assert cpp_extension.load_inline(*call[0], **call[1]) == "built"
    assert built == [("ext", 1)] * 3 and turns.compiles == 0
    assert [n["by"] for n in notes[:2]] == ["compiler", "candidate"]  # its call's limit paused, then afresh


@pytest.mark.skipif(shutil.which("ninja") is None or shutil.which("c++") is None, reason="needs ninja and c++")
def test_a_shards_build_compiles_one_source_at_a_time_and_stops_at_the_first_failure(tmp_path):
    """A check shard's build compiles one source at a time (`stages.SHARD_COMPILE_JOBS`): a build whose
    first source fails never starts its second, as a binding that cannot compile (torch compiles it
    first) never starts the nvcc beside it. With two at a time both run, the second to its end. Two
    C++ sources without torch's headers stand in: the build machinery is the same."""
    from rescore import stages
    from rescore.engine.cuda_build import prebuild
    from rescore.model.records import Problem, Submission

    source = (
        "import pathlib\nfrom torch.utils.cpp_extension import load\n\n"
        'pathlib.Path("bad.cpp").write_text("#error the binding does not compile\\n")\n'
        'pathlib.Path("second.cpp").write_text("int second() { return 2; }\\n")\n'
        'ext = load(name="two_sources", sources=["bad.cpp", "second.cpp"])\n'
    )

    def second_compiled(jobs: int, root: Path) -> bool:
        sub = Submission("two", Problem("p", "", "p.py"), source, "two.py", language="cuda")
        table = prebuild([sub], "cuda", root, compile_jobs=jobs)
        assert table["status"].tolist() == ["compile_failed"]
        return any(root.rglob("second.o"))

    assert stages.SHARD_COMPILE_JOBS == 1 and not second_compiled(1, tmp_path / "one")
    assert second_compiled(2, tmp_path / "two")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("ninja") is None or shutil.which("c++") is None, reason="needs ninja and c++")
def test_a_source_loaded_from_a_new_temporary_folder_is_built_once_and_imported_by_the_worker(tmp_path):
    """CUDA-L1's habit: the source written into `tempfile.mkdtemp()` at each import, then `load`ed
    from there with that folder as its `build_directory`. The prebuild builds it in the source's folder
    of the cache and the worker imports that library, where it compiled the whole extension again at
    every import (94 s on the H100, and 59 s at each of three restarts for `level1/task26`). A C++-only
    extension stands in for CUDA (no GPU here)."""
    from rescore.engine.cuda_build import prebuild
    from rescore.model.records import Problem, Submission
    from rescore.runtime.extensions import extensions_dir

    source = (
        "import os, tempfile\nfrom torch.utils.cpp_extension import load\n\n"
        "folder = tempfile.mkdtemp()\n"
        "path = os.path.join(folder, 'plus_one.cpp')\n"
        "with open(path, 'w') as f:\n"
        "    f.write('#include <torch/extension.h>\\n'\n"
        "            'torch::Tensor plus_one(torch::Tensor x) { return x + 1; }\\n'\n"
        "            'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"plus_one\", &plus_one); }\\n')\n"
        "ext = load(name='plus_one', sources=[path], build_directory=folder)\n"
    )
    sub = Submission("k", Problem("p", "", "p.py"), source, "k.py", language="cuda")
    table = prebuild([sub], "cuda", tmp_path)
    assert table["status"].tolist() == ["loaded"], table["error"].tolist()
    library = extensions_dir(source, tmp_path) / "plus_one"
    objects = {o: o.stat().st_mtime_ns for o in library.glob("*.o")}
    assert objects and any(library.glob("*.so"))
    worker = (
        "import sys, time, torch; from rescore.worker.prebuilt import activate; src = open(sys.argv[1]).read(); "
        "activate(src, sys.argv[2]); t = time.time(); ns = {}; exec(compile(src, 'k.py', 'exec'), ns); "
        "print(ns['ext'].plus_one(torch.zeros(2)).tolist(), time.time() - t)"
    )
    (tmp_path / "k.py").write_text(source)
    out = subprocess.run([sys.executable, "-c", worker, str(tmp_path / "k.py"), str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("]")[0] == "[1.0, 1.0" and float(out.stdout.split()[-1]) < 10, out.stdout
    assert {o: o.stat().st_mtime_ns for o in library.glob("*.o")} == objects  # nothing compiled again


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("ninja") is None and shutil.which("c++") is None, reason="needs ninja and c++")
def test_cuda_prebuild_compiles_once_in_parallel_and_records_failures(tmp_path):
    """A C++-only load_inline stands in for CUDA (no GPU here): the build machinery is the same."""
    from rescore.engine.cuda_build import prebuild
    from rescore.model.records import Problem, Submission
    from rescore.runtime.extensions import extensions_dir
    from rescore.worker.prebuilt import recorded_failure

    good = (
        "import torch\nfrom torch.utils.cpp_extension import load_inline\n\n"
        'ext = load_inline(name="same_name", cpp_sources="torch::Tensor f(torch::Tensor x) { return x + 1; }",'
        ' functions=["f"])\n\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n'
        "        return ext.f(x)\n"
    )
    # a compiler that fails at once (an option it does not know) rather than after parsing torch's headers
    bad = good.replace('name="same_name",', 'name="same_name", extra_cflags=["--no-such-option"],')
    # the CUDA-L1 habit: the failed build is caught and the kernel falls back (its import succeeds)
    caught = bad.replace("ext = load_inline(", "try:\n    ext = load_inline(").replace(
        ' functions=["f"])\n', ' functions=["f"])\nexcept RuntimeError:\n    ext = None\n')
    p = Problem("p", "", "p.py")
    subs = [Submission(n, p, s, f"{n}.py", language="cuda")
            for n, s in (("a", good), ("b", good), ("c", bad), ("d", caught))]
    cold = prebuild(subs, "cuda", tmp_path, jobs=2).set_index("name")
    assert list(cold["status"]) == ["loaded", "loaded", "compile_failed", "compile_failed"]
    assert not cold["cached"].any() and list(cold["ok"]) == [True, True, False, True]
    assert list(cold["compiled"]) == [True, True, False, False]
    assert "error" in cold.loc["c", "error"] and "error" in cold.loc["d", "error"]
    assert cold.loc["a", "extensions"] == "same_name"
    assert recorded_failure(bad, tmp_path) and recorded_failure(good, tmp_path) is None
    assert recorded_failure(caught, tmp_path) is None  # it imports: the worker raises the call's error again
    warm = prebuild(subs, "cuda", tmp_path, jobs=2).set_index("name")
    assert warm["cached"].all() and (warm["seconds"] == 0).all() and list(warm["status"]) == list(cold["status"])
    # the check worker reuses the build: importing after activate() compiles nothing
    probe = (
        "import sys, time; from rescore.worker.prebuilt import activate; src = open(sys.argv[1]).read(); "
        "activate(src, sys.argv[2]); t = time.time(); exec(compile(src, 'k.py', 'exec')); "
        "print(time.time() - t)"
    )
    # as a cache copied to another machine can: a source looks newer than its object, and ninja
    # would compile it again
    build = next(extensions_dir(good, tmp_path).glob("same_name/main.cpp")).parent
    objects = {o: o.stat().st_mtime_ns for o in build.glob("*.o")}
    import os
    import time

    later = time.time() + 60
    os.utime(build / "main.cpp", (later, later))
    (tmp_path / "k.py").write_text(good)
    out = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path / "k.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0 and float(out.stdout.split()[-1]) < 30, out.stderr[-2000:]
    assert objects and {o: o.stat().st_mtime_ns for o in build.glob("*.o")} == objects
    # the caught failure: the worker raises the prebuild's error at once, the submission falls back, and
    # the worker's record says its CUDA never built (nothing is compiled again)
    (tmp_path / "d.py").write_text(caught)
    fell_back = (
        "import sys, json; from rescore.worker.prebuilt import activate; from rescore.worker.usage import "
        "ExtensionUse; src = open(sys.argv[1]).read(); activate(src, sys.argv[2]); ns = {}; "
        "exec(compile(src, 'd.py', 'exec'), ns); print(json.dumps([ns['ext'] is None, ExtensionUse.failed]))"
    )
    out = subprocess.run([sys.executable, "-c", fell_back, str(tmp_path / "d.py"), str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    none, [[status, error]] = json.loads(out.stdout.splitlines()[-1])
    assert none and status == "compile_failed" and "not compiled again" in error, out.stderr[-2000:]
