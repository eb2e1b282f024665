"""Sizes and values the problem allows: names a problem derives from its sizes follow them, the
relations its reference needs among sizes are kept by every draw, a case the problem itself refuses
is inconclusive (`skipped`, naming the problem and the sizes), and each input's domain comes from
evidence that can show a sign (never from a one-element draw)."""

from __future__ import annotations

import json
import math
from collections import Counter

import pytest
from conftest import TOY, toy_submission

from rescore.engine.runner import RunConfig, run_submission
from rescore.inputs.relations import satisfy
from rescore.inputs.shapes import fit_budget
from rescore.model.derivations import derived_names
from rescore.model.outcomes import Outcome
from rescore.model.schema import Dim, OpSchema, Relation
from rescore.oracle.reference import ReferenceRejects
from rescore.runtime.modules import load_module
from rescore.worker import case_inputs
from rescore.worker.problem_schema import build_schema
from rescore.worker.problem_sizes import bound_sizes

DERIVED = '''
import torch
in_channels = 3
out_channels = in_channels
groups = in_channels
scale_shape = (out_channels, 1, 1)
hidden = 4 * in_channels
height, width = 2 * in_channels, 5
step = 12 // (in_channels - 2)
'''


def _module(source: str, tmp_path, name: str = "problem"):
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    return load_module(source, str(path), "problem")


def test_names_the_module_derives_from_a_size_follow_it_and_are_put_back(tmp_path):
    module = _module(DERIVED, tmp_path)
    assert derived_names(DERIVED, ["in_channels"]) == {
        "out_channels": "out_channels = in_channels", "groups": "groups = in_channels",
        "scale_shape": "scale_shape = (out_channels, 1, 1)", "hidden": "hidden = 4 * in_channels",
        "height": "height, width = (2 * in_channels, 5)", "width": "height, width = (2 * in_channels, 5)",
        "step": "step = 12 // (in_channels - 2)"}
    with bound_sizes(module, {"in_channels": 7}):
        assert (module.out_channels, module.groups, module.scale_shape, module.hidden) == (7, 7, (7, 1, 1), 28)
        assert (module.height, module.width, module.step) == (14, 5, 2)
    assert (module.in_channels, module.groups, module.scale_shape, module.step) == (3, 3, (3, 1, 1), 12)
    # a derivation that cannot be computed at the sizes refuses them, as the reference would
    with pytest.raises(ReferenceRejects, match=r"step = 12 // \(in_channels - 2\).*ZeroDivisionError"):
        with bound_sizes(module, {"in_channels": 2}):
            pass
    assert module.in_channels == 3


def test_a_derived_name_is_no_free_size_of_the_inferred_schema():
    module = load_module((TOY / "problem_depthwise.py").read_text(), str(TOY / "problem_depthwise.py"), "problem")
    schema = build_schema(module, (TOY / "problem_depthwise.py").read_text(), None)
    assert [d.name for d in schema.dims] == ["batch_size", "in_channels", "kernel_size", "height", "width"]
    assert schema.derived == {"out_channels": "out_channels = in_channels", "groups": "groups = in_channels"}


def test_grouped_conv_whose_groups_follow_the_channels_passes_every_case(worker):
    """KernelBench level 1 task 85's statement, CPU-sized: a correct kernel that builds its conv
    from the `groups` it is given passes every case; with groups left at 3 while in_channels moved,
    it `crash`ed ("Given groups=3 ...") on the sizes the fuzzer made up."""
    sub = toy_submission("problem_depthwise.py", "depthwise_correct.py", dtypes=("float32",))
    rows = run_submission(sub, RunConfig(strategies={"default": 6, "boundary": 6}, dtypes=("float32",)), worker)
    assert Counter(r["outcome"] for r in rows) == {Outcome.PASS: 13}
    channels = {json.loads(r["sizes"])["in_channels"] for r in rows if r["oracle"] == "fuzz"}
    assert channels - {3}  # the channels did move


def test_group_norm_draws_keep_num_groups_dividing_the_channels(worker):
    """num_groups and channels are free literals; GroupNorm refuses channels its groups do not
    divide. The load finds the relation on the meta device, and every draw keeps it."""
    sub = toy_submission("problem_groupnorm.py", "groupnorm_correct.py", dtypes=("float32",))
    module = load_module(sub.problem.source, sub.problem.path, "problem")
    schema = build_schema(module, sub.problem.source, None)
    assert schema.relations == (Relation("divides", "num_groups", "channels"),)
    for strategy in ("default", "boundary", "regular"):
        for seed in range(40):
            sizes = case_inputs.draw(module, schema, 1 << 15, strategy, seed, "float32").sizes
            assert sizes["channels"] % sizes["num_groups"] == 0, (strategy, seed, sizes)
            held = case_inputs.held_draw(module, schema, 1 << 15, strategy, seed, "float32").sizes
            assert held["channels"] % held["num_groups"] == 0, (strategy, seed, held)
    rows = run_submission(sub, RunConfig(strategies={"default": 6, "boundary": 6}, dtypes=("float32",)), worker)
    assert Counter(r["outcome"] for r in rows) == {Outcome.PASS: 13}


TWO_DIVISORS = '''
import torch
import torch.nn as nn

batch_size = 2
channels = 16
kernel_size = 4
num_groups = 4
length = 32


class Model(nn.Module):
    def __init__(self, channels, kernel_size, num_groups):
        super().__init__()
        self.conv = nn.Conv1d(channels, channels, kernel_size)
        self.norm = nn.GroupNorm(num_groups, channels)

    def forward(self, x):
        return self.norm(self.conv(x))


def get_inputs():
    return [torch.randn(batch_size, channels, length)]


def get_init_inputs():
    return [channels, kernel_size, num_groups]
'''


def test_of_the_relations_the_benchmark_sizes_have_only_the_one_the_reference_needs_is_kept(tmp_path):
    """At the benchmark's sizes 2, 4 and 4 all divide 16 and 32, and kernel_size equals num_groups;
    only num_groups | channels makes the reference refuse, so it alone is kept (kernel_size has
    the same value, and moving it alone shows the conv does not care)."""
    module = _module(TWO_DIVISORS, tmp_path, "two_divisors")
    schema = build_schema(module, TWO_DIVISORS, None)
    assert [d.name for d in schema.dims] == ["batch_size", "channels", "kernel_size", "num_groups", "length"]
    assert schema.relations == (Relation("divides", "num_groups", "channels"),)


def test_relations_survive_the_element_budget():
    dims = (Dim("groups", 4, 1, 64), Dim("channels", 64, 1, 4096), Dim("copy", 64, 1, 4096), Dim("n", 8, 1, 64))
    relations = (Relation("divides", "groups", "channels"), Relation("equal", "channels", "copy"))
    schema = OpSchema(dims=dims, relations=relations)
    assert satisfy({"groups": 6, "channels": 100, "copy": 5, "n": 3}, relations) == {
        "groups": 6, "channels": 102, "copy": 102, "n": 3}
    sizes = fit_budget({"groups": 48, "channels": 4000, "copy": 1, "n": 64}, schema,
                       lambda s: s["channels"] * s["n"], 1 << 12)
    assert sizes["channels"] * sizes["n"] <= 1 << 12
    assert sizes["channels"] % sizes["groups"] == 0 and sizes["copy"] == sizes["channels"]
    assert math.gcd(sizes["channels"], sizes["groups"]) == sizes["groups"]


def test_a_case_the_problem_refuses_is_inconclusive_never_the_kernels_crash(worker):
    """The reference refuses every size but its own (its Model cannot even be built at another
    `features`); the candidate's ModelNew fails to build there too. The reference is asked first,
    so no case is the kernel's crash: each is `skipped`, naming the problem file and the sizes."""
    sub = toy_submission("problem_pinned.py", "pinned_refuses.py", dtypes=("float32",))
    rows = run_submission(sub, RunConfig(strategies={"boundary": 4}, dtypes=("float32",)), worker)
    assert rows[0]["oracle"] == "fixed" and rows[0]["outcome"] == Outcome.PASS
    fuzz = rows[1:]
    assert {r["outcome"] for r in fuzz} == {Outcome.SKIPPED}
    for r in fuzz:
        assert r["reason"].startswith("inconclusive: every size drawn was refused by the problem itself")
        assert f"problem {TOY / 'problem_pinned.py'} refuses sizes {r['sizes']}" in r["reason"]
        assert "defined for 8 features" in r["reason"] or "takes a batch of 4" in r["reason"]


# -- input domains ---------------------------------------------------------------------------------

ONE_ELEMENT = '''
import torch
import torch.nn as nn

n = 1


def _draw(k):
    return torch.randn(k)


class Model(nn.Module):
    def forward(self, a, b, c, d, e, f):
        return a + b + c + d + e + f


def get_inputs():
    return [torch.randn(n), torch.rand(n), torch.randn(n).abs() + 1, _draw(n), _draw(n).abs(), _draw(1).abs()]


def get_init_inputs():
    return []
'''


def test_domains_come_from_evidence_that_can_show_a_sign_never_from_a_one_element_draw(tmp_path):
    """At the problem's own size every input is one element, and under seed 0 each draw is positive:
    one draw there decided `positive` for all of them. Now the source decides where it can (randn is
    real, rand is in [0, 1], |x| + 1 is positive), a draw only at sizes where it holds thousands of
    elements, and an input no size can grow stays real."""
    module = _module(ONE_ELEMENT, tmp_path)
    schema = build_schema(module, ONE_ELEMENT, None)
    got = [(d.name, d.domain, d.origin) for d in schema.input_domains]
    assert got == [
        ("a", "real", "source"), ("b", "unit", "source"), ("c", "positive", "source"),
        ("d", "real", "sampled"), ("e", "positive", "sampled"), ("f", "real", "default")]
    assert schema.domains == {0: "real", 1: "unit", 2: "positive", 3: "real", 4: "positive", 5: "real"}
    evidence = {d.name: d.evidence for d in schema.input_domains}
    assert evidence["a"] == "get_inputs(): torch.randn(n) takes values in [-inf, inf]"
    assert "sampled 4096 elements over 4 seeds" in evidence["e"] and "none negative" in evidence["e"]
    assert "too few to restrict the domain" in evidence["f"]
    assert json.loads(schema.domains_json())[0] == {
        "input": "a", "domain": "real", "from": "source", "evidence": evidence["a"]}


def test_an_explicit_domain_wins_and_integer_inputs_have_none(tmp_path):
    source = ONE_ELEMENT.replace("torch.randn(n), torch.rand(n)", "torch.randn(n), torch.randint(0, 4, (n,))")
    module = _module(source, tmp_path, "ints")
    schema = build_schema(module, source, {"dims": {"n": [1, 8]}, "inputs": {"a": {"domain": "positive"}}})
    a, b = schema.input_domains[:2]
    assert (a.domain, a.origin, a.evidence) == ("positive", "schema", "the op schema names it")
    assert (b.domain, b.origin, b.evidence) == (None, "not floating", "a torch.int64 tensor")


SHAPED = '''
import torch
batch = 4
dim = 8
calls = [0]


def get_inputs():
    calls[0] += 1
    return [torch.randn(batch, dim), torch.randn(dim)]
'''


def test_shapes_made_on_the_meta_device_are_asked_once_per_sizes_and_those_made_for_real_each_time(tmp_path):
    """A case's draw asks for its inputs' shapes at the sizes it tries two or three times: made on the
    meta device, they are remembered per problem and sizes (the answer the same); a factory that cannot
    run on meta is drawn for real each time, from seed 0, as before."""
    import torch

    from rescore.worker.problem_sizes import input_shapes

    module = _module(SHAPED, tmp_path)
    assert input_shapes(module, {"batch": 2, "dim": 3}) == [(2, 3), (3,)]
    assert input_shapes(module, {"batch": 2, "dim": 3}) == [(2, 3), (3,)]
    assert input_shapes(module, {"batch": 5, "dim": 3}) == [(5, 3), (3,)]
    assert module.calls[0] == 2
    real = _module(SHAPED.replace("torch.randn(dim)", "torch.randn(dim).numpy()"), tmp_path, "real")
    torch.manual_seed(7)
    assert input_shapes(real, {"batch": 2, "dim": 3}) == [(2, 3), None]
    assert input_shapes(real, {"batch": 2, "dim": 3}) == [(2, 3), None]
    assert real.calls[0] == 4  # on meta, then for real, each time
    after = torch.randn(2)
    torch.manual_seed(0)
    torch.randn(2, 3), torch.randn(3)
    assert torch.equal(after, torch.randn(2))  # the generator where a draw from seed 0 leaves it


def test_a_case_and_its_decoys_ask_for_the_shapes_on_meta_once_and_a_list_input_each_time(tmp_path):
    """`make_inputs` remembers what `get_inputs()` made on the meta device per problem and sizes, the
    values drawn as before; a problem that hands the candidate a list (which it could change) is asked
    each time."""
    import types
    from dataclasses import replace

    import torch

    from rescore.inputs.strategies import CaseSpec
    from rescore.worker import case_inputs

    source = SHAPED + "\n\ndef get_init_inputs():\n    return []\n"
    module = _module(source, tmp_path)
    schema = types.SimpleNamespace(domains={})
    spec = CaseSpec("default", 11, "float32", {"batch": 2, "dim": 3}, "normal", "contiguous")
    first, _ = case_inputs.make_inputs(module, schema, "cpu", spec)
    again, _ = case_inputs.make_inputs(module, schema, "cpu", spec)
    decoy = case_inputs.make_inputs(module, schema, "cpu", replace(spec, seed=12))[0]
    assert module.calls[0] == 1
    assert all(torch.equal(a, b) for a, b in zip(first, again)) and not torch.equal(first[0], decoy[0])
    assert [list(x.shape) for x in first] == [[2, 3], [3]]
    case_inputs.make_inputs(module, schema, "cpu", replace(spec, sizes={"batch": 5, "dim": 3}))
    assert module.calls[0] == 2
    listed = _module(source.replace("torch.randn(dim)]", "torch.randn(dim), [batch]]"), tmp_path, "listed")
    for _ in range(2):
        assert case_inputs.make_inputs(listed, schema, "cpu", spec)[0][2] == [2]
    assert listed.calls[0] == 2


def test_a_load_traces_the_reference_at_the_fuzz_budget_where_the_benchmark_is_past_it(tmp_path):
    """What the parent reserves a fuzz case by (`footprint.load_estimates`): the reference's traced
    peak at the benchmark's sizes fitted to the budget, where the benchmark's largest input is past it."""
    from rescore.worker.footprint import load_estimates

    source = ONE_ELEMENT.replace("n = 1", "n = 1 << 20")
    module = _module(source, tmp_path)
    schema = build_schema(module, source, {"dims": {"n": [1, 1 << 20]}})
    full = load_estimates(module, schema, 1 << 30)
    assert set(full) == {"estimate"} and full["estimate"] >= 6 * 4 * (1 << 20)  # six float32 inputs at least
    fitted = load_estimates(module, schema, 1 << 12)
    assert fitted["estimate"] == full["estimate"]
    assert 6 * 4 * (1 << 12) <= fitted["fuzz_estimate"] <= fitted["estimate"] // 64
    # inputs that cannot be made on the meta device are not drawn for real at every size tried
    real = source.replace("def get_inputs():", "def get_inputs():\n    calls[0] += 1\n    torch.zeros(1).numpy()")
    real = real.replace("n = 1 << 20", "n = 1 << 20\ncalls = [0]")
    drawn = _module(real, tmp_path, "drawn")
    drawn_schema = build_schema(drawn, real, {"dims": {"n": [1, 1 << 20]}})
    drawn.calls[0] = 0
    estimates = load_estimates(drawn, drawn_schema, 1 << 12)
    assert "fuzz_estimate" not in estimates and drawn.calls[0] == 3  # the trace's two tries, one look on meta
