"""The NaN-aware comparison: wrong values are flagged, right ones pass, NaN where the reference has
NaN is not a failure, and a non-finite value the dtype itself forces is accepted."""

import math

import torch

from rescore.oracle.compare import compare, max_finite_error, ulp_of


def test_correct_values_pass():
    t = torch.randn(100, dtype=torch.float64)
    c = compare(t.to(torch.float32), t, torch.float32, atol=1e-5, rtol=1.3e-6)
    assert c.outcome == "pass"
    assert c.n_mismatch == 0 and c.err_ulp <= 0.5 + 1e-9


def test_the_ulp_is_the_dtypes_spacing_at_the_truth_even_just_below_a_power_of_two():
    """`err_ulp`'s unit is the dtype's spacing at the float64 truth: numpy's `spacing` at float32
    values, and at a truth a float64 step below a power of two, the spacing below it (log2 in float64
    rounds that truth up to the power, which doubles it)."""
    import numpy as np

    values = np.random.default_rng(0).standard_normal(1000).astype(np.float32) * 1e3
    got = ulp_of(torch.from_numpy(values.astype(np.float64)), torch.float32)
    assert torch.equal(got, torch.from_numpy(np.spacing(np.abs(values)).astype(np.float64)))
    below = torch.nextafter(torch.tensor([1024.0, 2.0**-20], dtype=torch.float64), torch.zeros(2, dtype=torch.float64))
    assert ulp_of(below, torch.float32).tolist() == [2.0**9 * 2.0**-23, 2.0**-21 * 2.0**-23]
    assert ulp_of(torch.tensor([0.0], dtype=torch.float64), torch.float32).item() == 2.0**-126 * 2.0**-23


def test_wrong_values_are_flagged_with_location():
    t = torch.randn(4, 5, dtype=torch.float64)
    out = t.to(torch.float32).clone()
    out[2, 3] += 1.0
    c = compare(out, t, torch.float32, atol=1e-5, rtol=1.3e-6)
    assert c.outcome == "mismatch"
    assert c.n_mismatch == 1 and c.first_mismatch == [2, 3]
    assert abs(c.max_abs_err - 1.0) < 1e-5
    assert "1 / 20 elements" in c.message() and "(2, 3)" in c.message()


def test_nan_where_reference_has_nan_is_not_a_failure():
    t = torch.tensor([1.0, math.nan, -math.inf, 2.0], dtype=torch.float64)
    out = torch.tensor([1.0, math.nan, -math.inf, 2.0], dtype=torch.float32)
    assert compare(out, t, torch.float32, 1e-5, 1e-6).outcome == "pass"


def test_nan_where_reference_is_finite_is_nonfinite():
    t = torch.tensor([1.0, 3.0], dtype=torch.float64)
    out = torch.tensor([1.0, math.nan], dtype=torch.float32)
    c = compare(out, t, torch.float32, 1e-5, 1e-6)
    assert c.outcome == "nonfinite" and c.n_nonfinite == 1


def test_finite_where_reference_is_nan_is_nonfinite():
    t = torch.tensor([math.nan], dtype=torch.float64)
    assert compare(torch.tensor([0.0]), t, torch.float32, 1e-5, 1e-6).outcome == "nonfinite"


def test_overflow_forced_by_the_dtype_is_accepted():
    t = torch.tensor([70000.0], dtype=torch.float64)  # not representable in float16
    out = torch.tensor([math.inf], dtype=torch.float16)
    assert compare(out, t, torch.float16, 1e-5, 1e-3).outcome == "pass"


def test_nonfinite_matching_the_low_precision_reference_is_accepted():
    t = torch.tensor([1e30], dtype=torch.float64)
    ref_lowp = torch.tensor([math.inf], dtype=torch.float32)  # e.g. x*x overflowed in float32
    out = torch.tensor([math.inf], dtype=torch.float32)
    assert compare(out, t, torch.float32, 1e-5, 1e-6, ref_lowp=ref_lowp).outcome == "pass"
    assert compare(out, t, torch.float32, 1e-5, 1e-6).outcome == "nonfinite"


def test_slack_from_the_reference_error_admits_a_correct_reduction():
    torch.manual_seed(0)
    x = torch.randn(64, 4096, dtype=torch.float64)
    truth = x.sum(1)
    ref32 = x.float().sum(1)
    naive = torch.zeros(64)
    for i in range(0, 4096, 1024):  # block-sequential float32 accumulation, as a Triton kernel does
        naive += x[:, i : i + 1024].float().sum(1)
    strict = compare(naive, truth, torch.float32, 1e-5, 1.3e-6)
    slack = 4 * max_finite_error(ref32, truth)
    assert compare(naive, truth, torch.float32, 1e-5, 1.3e-6, slack=slack).outcome == "pass"
    assert strict.max_abs_err > 0


def test_a_small_gpu_case_is_judged_on_host_copies_and_a_large_one_where_it_is():
    from rescore.worker import placement

    # only the placement rule is under test: it reads the device name ("meta" stands for a GPU)
    small, big = torch.ones(8), torch.ones(placement.HOST_JUDGE_ELEMENTS + 1)
    outs, lowps, scalars = placement.judged_where("meta", [small], None, [small, 3])
    assert lowps is None and scalars[1] == 3 and torch.equal(outs[0], small)
    # a large case is judged on the device, a truth computed on the host moved there with it
    moved = placement.judged_where("meta", [small], [big])
    assert moved[0][0].device.type == moved[1][0].device.type == "meta"
    assert placement.judged_where("cpu", [small])[0][0] is small


def test_a_small_gpu_case_has_its_float64_truth_computed_on_the_host():
    from rescore.worker import placement

    where = placement.TruthPlacement("cuda")  # the rule reads the device name only
    small, big = torch.ones(64, 64, dtype=torch.float64), torch.ones(placement.HOST_JUDGE_ELEMENTS + 1)
    assert where.choose([small, 3], reduction_len=64) == "cpu"
    assert where.choose([small], reduction_len=placement.HOST_TRUTH_WORK) == "cuda"  # a long reduction
    assert where.choose([small, big], reduction_len=1) == "cuda"
    where.device = "cpu"
    assert where.choose([small], reduction_len=1) == "cpu"


def test_a_seed_draws_the_same_sizes_wherever_its_truth_was_placed():
    """Which sizes a seed draws must not hang on where the truth was placed (learned from wall-clock
    times): a refusal on one device is tried on the other before the sizes are refused, and an empty
    output is refused on either."""
    from types import SimpleNamespace

    from rescore.oracle.reference import ReferenceRejects
    from rescore.worker import placement
    from rescore.worker.case import accepted_truth

    class Reference:  # refuses on the devices in `refuses`, else answers (an empty output on those in `empty`)
        def __init__(self, refuses, empty):
            self.refuses, self.empty, self.ran = refuses, empty, []

        def run(self, problem, inputs64, init, tdtype, wseed, device, truth_device, record=None):
            self.ran.append(truth_device)
            if truth_device in self.refuses:
                raise ReferenceRejects(f"refused on {truth_device}")
            return [torch.zeros(0 if truth_device in self.empty else 1)], None

    def first_truth(refuses, placed, inputs, empty=()):
        where = placement.TruthPlacement("cuda")
        where.truth_device = placed
        ctx = SimpleNamespace(placement=where, reference=Reference(refuses, empty), device="cuda",
                              loaded=SimpleNamespace(problem=None))
        try:
            accepted_truth(ctx, inputs, [], torch.float32, 0)
            return where.truth_device, ctx.reference.ran
        except ReferenceRejects:
            return "refused", ctx.reference.ran

    small, big = [torch.ones(8)], [torch.ones(placement.HOST_JUDGE_ELEMENTS + 1)]
    # the host refuses, the device does not: accepted on the device wherever it was placed
    assert first_truth({"cpu"}, "cpu", small) == ("cuda", ["cpu", "cuda"])
    assert first_truth({"cpu"}, "cuda", small) == ("cuda", ["cuda"])
    assert first_truth({"cuda"}, "cuda", small) == ("cpu", ["cuda", "cpu"])
    assert first_truth({"cpu", "cuda"}, "cpu", small) == ("refused", ["cpu", "cuda"])
    # an output with no element judges nothing: refused, whichever device computed it
    assert first_truth({"cpu"}, "cpu", small, empty={"cuda"}) == ("refused", ["cpu", "cuda"])
    assert first_truth(set(), "cuda", small, empty={"cuda"}) == ("refused", ["cuda"])
    # a case too large for the host is always placed on the device: its refusal is final
    assert first_truth({"cuda"}, "cuda", big) == ("refused", ["cuda"])
    cpu_run = placement.TruthPlacement("cpu")
    assert cpu_run.alternative(small) is None


def test_a_digest_changes_with_the_bytes_the_shape_and_the_device_named():
    from rescore.worker.integrity import digest

    a = torch.arange(6.0)
    assert digest([a, 1]) == digest([a.clone()]) != digest([a + 1])
    assert digest([a]) != digest([a.reshape(2, 3)]) and digest(None) == digest([])


def test_a_second_run_that_differs_only_in_rounding_passes_and_one_that_is_wrong_fails():
    from rescore.oracle import judge

    truth = torch.randn(64, dtype=torch.float64) * 10
    first = truth.to(torch.float32)
    passed = {"outcome": "pass", "reason": ""}

    def rejudge(again):
        return judge.judge_rerun(first, again, [truth], [first.clone()], torch.float32, "float32", 1, passed,
                                 device="cpu", overrides=None)

    # atomics adding in another order: the last bit moves, the case still passes
    assert rejudge(torch.nextafter(first, torch.full_like(first, math.inf))) is passed
    lost = first.clone()
    lost[5] += 1.0  # a lost update
    verdict = rejudge(lost)
    assert verdict["outcome"] == "mismatch" and verdict["diagnosis"] == "nondeterministic"
    assert "differs from it in 1 elements" in verdict["reason"]
    assert rejudge(first[:10])["outcome"] == "bad_output"


def test_the_reference_lowp_ratio_uses_the_tolerances_of_the_verdict():
    from rescore.oracle.tolerance import policy_ratios

    t = torch.full((8,), 1000.0, dtype=torch.float64)
    o = (t * (1 + 5e-6)).to(torch.float32)  # 5e-6 relative: over the float32 default rtol 1.3e-6
    default = policy_ratios(o, t, "float32", 0.0, 1, False)["reference-lowp"]
    loose = policy_ratios(o, t, "float32", 0.0, 1, False, (1e-5, 1.1e-5))["reference-lowp"]
    assert default > 1.0 >= loose


def test_a_linear_ops_slack_scales_with_its_terms_not_its_result():
    """A row [1, 2^60, -2^60]: float64 sums it to 0 in order (the 1 is lost), a kernel that adds the
    pair first returns 1, the right answer. The terms' size (2^61) covers it; a wrong value on a row
    of ordinary terms is still flagged."""
    from rescore.oracle.tolerance import DEFAULT_POLICY

    x = torch.tensor([1.0, 2.0**60, -(2.0**60)], dtype=torch.float64)
    truth = x.cumsum(0)  # [1, 2^60, 0]
    assert truth[-1] == 0.0
    out = torch.tensor([1.0, 2.0**60, 1.0], dtype=torch.float32)
    slack = DEFAULT_POLICY.terms_slack("float32", x.abs().cumsum(0))
    assert compare(out, truth, torch.float32, 1e-5, 1.3e-6).outcome == "mismatch"
    c = compare(out, truth, torch.float32, 1e-5, 1.3e-6, slack)
    assert c.outcome == "pass" and isinstance(c.slack, float)
    y = torch.randn(64, dtype=torch.float64)
    wrong = y.cumsum(0).to(torch.float32)
    wrong[40] += 0.01
    terms = DEFAULT_POLICY.terms_slack("float32", y.abs().cumsum(0))
    c = compare(wrong, y.cumsum(0), torch.float32, 1e-5, 1.3e-6, terms)
    assert c.outcome == "mismatch" and c.first_mismatch == [40] and "+ " in c.message()


def test_corpus_reductions_declare_themselves_linear():
    from rescore.corpus.catalog import load_corpus

    linear = {s.problem.op for s in load_corpus() if (s.problem.schema or {}).get("linear")}
    assert {"cumsum", "row_sum", "mean_dim"} <= linear and "softmax" not in linear


def test_a_tensor_past_the_chunk_size_is_judged_the_same_in_chunks(monkeypatch):
    """A 2^31-element trigger is compared a chunk at a time (the one-pass form needs ~10 float64
    copies of the output); counts, maxima, the worst element and the policy ratios must not change."""
    from rescore.oracle import compare as cmp_mod
    from rescore.oracle.tolerance import policy_ratios

    g = torch.Generator().manual_seed(0)
    t = torch.randn(8, 300, generator=g, dtype=torch.float64)
    out = t.to(torch.float32).clone()
    out[1, 7] += 0.5
    out[6, 250] -= 2.0
    out[3, 3] = math.nan
    slack = torch.rand(8, 300, generator=g, dtype=torch.float64) * 1e-6
    finite = out.clone()
    finite[3, 3] = t[3, 3]
    cases = [(out, t, slack), (finite, t, slack), (t.to(torch.float32), t, 0.0)]
    one_pass = [cmp_mod.compare(o, tt, torch.float32, 1e-5, 1.3e-6, s, tt.to(torch.float32)) for o, tt, s in cases]
    ratios = policy_ratios(finite, t, "float32", slack, 300, False)
    monkeypatch.setattr(cmp_mod, "CHUNK_ELEMENTS", 128)
    chunked = [cmp_mod.compare(o, tt, torch.float32, 1e-5, 1.3e-6, s, tt.to(torch.float32)) for o, tt, s in cases]
    for a, b in zip(one_pass, chunked):
        assert repr((a.outcome, a.n_mismatch, a.n_nonfinite, a.first_mismatch, a.worst_actual, a.worst_expected)) == \
               repr((b.outcome, b.n_mismatch, b.n_nonfinite, b.first_mismatch, b.worst_actual, b.worst_expected))
        assert (a.max_abs_err, a.max_rel_err, a.err_ulp, a.slack) == (b.max_abs_err, b.max_rel_err, b.err_ulp, b.slack)
    assert chunked[0].outcome == "nonfinite" and chunked[0].first_mismatch == [3, 3]
    assert chunked[1].outcome == "mismatch" and chunked[1].first_mismatch == [6, 250]
    assert policy_ratios(finite, t, "float32", slack, 300, False) == ratios
    assert abs(cmp_mod.max_finite_error(out, t) - 2.0) < 1e-6
    assert cmp_mod.max_abs_finite(out) == float(out[torch.isfinite(out)].abs().max())


def test_a_large_tensor_unwritten_past_a_block_is_diagnosed_from_counts(monkeypatch):
    """Wrapped 32-bit offsets leave the tail of a huge output unwritten (NaN: fresh memory is
    NaN-filled); the chunked comparison names that without holding the pattern."""
    from rescore.oracle import compare as cmp_mod

    monkeypatch.setattr(cmp_mod, "CHUNK_ELEMENTS", 256)
    t = torch.randn(4096, dtype=torch.float64)
    out = t.to(torch.float32).clone()
    out[2048:] = math.nan
    c = cmp_mod.compare(out, t, torch.float32, 1e-5, 1.3e-6)
    assert c.outcome == "nonfinite" and c.n_nonfinite == 2048 and c.first_mismatch == [2048]
    assert c.diagnosis == "tail_region"
    out[2048:] = 0.0
    out[:2048] = math.nan
    assert cmp_mod.compare(out, t, torch.float32, 1e-5, 1.3e-6).diagnosis == "everywhere"


def test_the_calibrated_model_holds_half_types_to_float32_accumulation():
    """A bfloat16 variance over 636 terms summed in float16 was 0.055 off (H200,
    var_dim_triton_fp16acc) and passed with the half type's eps on the sum; a correctly rounded
    bfloat16 output stays within half an ulp."""
    from rescore.oracle.tolerance import policy_ratios

    truth = torch.tensor([1.02, 0.97], dtype=torch.float64)
    rounded = truth.to(torch.bfloat16)
    assert policy_ratios(rounded, truth, "bfloat16", 0.0, 636, False)["calibrated-base"] <= 0.5
    off = (truth + 0.055).to(torch.bfloat16)
    assert policy_ratios(off, truth, "bfloat16", 0.0, 636, False)["calibrated-base"] > 2.0


def test_the_verdict_records_whether_the_output_held_a_nan_or_inf():
    """A NaN where the reference has one too passes rescore's NaN-aware oracle; `output_nonfinite` records
    it all the same, so the gpuemu papers' validator (any NaN or Inf fails) can be applied to the case."""
    from rescore.oracle import judge

    truth = torch.randn(4, 16, dtype=torch.float64)
    truth[1, 3] = math.nan
    truth[2, 0] = math.inf
    out = truth.to(torch.float32)

    def verdict(o):
        return judge.judge(o, [truth], [out.clone()], [], [], torch.float32, "float32", 1, device="cpu",
                           overrides=None)

    same = verdict(out)
    assert same["outcome"] == "pass" and same["output_nonfinite"] is True
    finite_truth = torch.nan_to_num(truth, nan=0.0, posinf=1.0)
    clean = judge.judge(finite_truth.to(torch.float32), [finite_truth], None, [], [], torch.float32, "float32", 1,
                        device="cpu", overrides=None)
    assert clean["outcome"] == "pass" and clean["output_nonfinite"] is False
    # of several outputs, the case's verdict says whether any held one
    pair = judge.judge((finite_truth.to(torch.float32), out), [finite_truth, truth], None, [], [], torch.float32,
                       "float32", 1, device="cpu", overrides=None)
    assert pair["outcome"] == "pass" and pair["output_nonfinite"] is True
    integer = judge.judge(torch.arange(4), [torch.arange(4)], None, [], [], torch.float32, "float32", 1,
                          device="cpu", overrides=None)
    assert integer["output_nonfinite"] is False


def test_an_output_finite_everywhere_is_judged_as_its_finite_part_of_a_masked_one():
    """Where output and truth are finite everywhere the comparison skips the masking; its errors,
    counts and policy ratios are those of the same elements judged beside a NaN both share."""
    from rescore.oracle.compare import max_abs_finite
    from rescore.oracle.tolerance import policy_ratios

    torch.manual_seed(3)
    t = torch.randn(257, dtype=torch.float64)
    t[5] = 0.0  # a zero truth with an error (relative error inf) and one without (0)
    t[6] = 0.0
    o = t.to(torch.float32)
    o[5] = 1e-3
    o[40] += 0.25  # a mismatch
    lp = t.to(torch.float32)
    slack = torch.rand(257, dtype=torch.float64) * 1e-6
    masked_t, masked_o = torch.cat([t, torch.tensor([math.nan], dtype=torch.float64)]), torch.cat(
        [o, torch.tensor([math.nan])])
    masked_lp, masked_slack = torch.cat([lp, torch.tensor([math.nan])]), torch.cat([slack, slack[:1]])

    fast = compare(o, t, torch.float32, 1e-5, 1.3e-6, slack, lp)
    masked = compare(masked_o, masked_t, torch.float32, 1e-5, 1.3e-6, masked_slack, masked_lp)
    for field in ("outcome", "max_abs_err", "max_rel_err", "err_ulp", "n_mismatch", "n_nonfinite", "first_mismatch"):
        assert getattr(fast, field) == getattr(masked, field), field
    assert fast.max_rel_err == math.inf and fast.n_mismatch == 2
    assert policy_ratios(o, t, "float32", slack, 16, False) == policy_ratios(
        masked_o, masked_t, "float32", masked_slack, 16, False)
    assert max_finite_error(lp, t) == max_finite_error(masked_lp, masked_t)
    assert max_abs_finite(t) == max_abs_finite(masked_t)


def test_the_policy_ratios_are_those_of_the_bounds_written_out(monkeypatch):
    """`policy_ratios` builds each bound in one buffer and reads the maxima once: bit for bit the
    ratio of the error to `atol + rtol * |truth| (+ slack)` as written out, for every policy and
    dtype, with a tensor slack (a linear op's), non-finite elements masked, and in chunks."""
    from rescore.model.tolerances import FIXED_POLICIES
    from rescore.oracle import compare as cmp_mod
    from rescore.oracle.tolerance import accumulation_eps, policy_ratios, torch_dtype

    def written_out(out, truth, dtype, slack, reduction_len, tols):
        o, t = out.reshape(-1).to(torch.float64), truth.reshape(-1).to(torch.float64)
        both = torch.isfinite(o) & torch.isfinite(t)
        err, mag = (o - t).abs()[both], t.abs()[both]
        s = slack.reshape(-1)[both] if isinstance(slack, torch.Tensor) else slack
        info = torch.finfo(torch_dtype(dtype))
        scale = accumulation_eps(dtype) * float(mag.max()) * max(1, reduction_len) ** 0.5
        found = {name: float((err / (table[dtype][0] + table[dtype][1] * mag)).max())
                 for name, table in FIXED_POLICIES.items()}
        found["reference-lowp"] = float((err / (tols[0] + tols[1] * mag + s)).max())
        found["calibrated-base"] = float((err / (float(info.eps) * mag + scale + float(info.smallest_normal))).max())
        return found

    g = torch.Generator().manual_seed(3)
    t = torch.randn(40, 300, generator=g, dtype=torch.float64) * 10
    for dtype in ("float32", "float16", "bfloat16"):
        out = (t + torch.randn(40, 300, generator=g, dtype=torch.float64) * 1e-3).to(torch_dtype(dtype))
        out[5, 5] = math.inf
        slack = torch.rand(40, 300, generator=g, dtype=torch.float64) * 1e-4
        for s in (0.0, 2e-3, slack):
            want = written_out(out, t, dtype, s, 77, (1e-5, 1.3e-6))
            assert policy_ratios(out, t, dtype, s, 77, False, (1e-5, 1.3e-6)) == want
    monkeypatch.setattr(cmp_mod, "CHUNK_ELEMENTS", 1000)
    assert policy_ratios(out, t, "bfloat16", slack, 77, False, (1e-5, 1.3e-6)) == want


def test_judging_a_finite_output_reads_the_device_few_times(monkeypatch):
    """Each read of a value on the device waits for it, and on a GPU shared by 16 workers each wait is
    long: a finite output's comparison reads its figures twice a chunk, and its whole judgement (the
    comparison, the low-precision reference's error, the truth's largest value, every policy's ratio)
    six times (a failing one adds the reads that locate and diagnose its wrong elements)."""
    from rescore.oracle.judge import judge_one

    reads = []
    for name in ("tolist", "item", "__bool__", "__float__", "__int__"):
        def counted(self, *args, _real=getattr(torch.Tensor, name), _name=name, **kwargs):
            reads.append(_name)
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    g = torch.Generator().manual_seed(0)
    t = torch.randn(64, 64, generator=g, dtype=torch.float64)
    o = t.to(torch.float32)
    assert compare(o, t, torch.float32, 1e-5, 1e-5).outcome == "pass"
    assert len(reads) == 2, reads
    reads.clear()
    verdict = judge_one(o, t, o, torch.float32, "float32", 1)
    assert verdict["outcome"] == "pass" and len(reads) == 6, reads


def test_all_finite_is_isfinite_all_for_every_dtype_and_value():
    """The one-reduction test of finiteness answers as `isfinite(x).all()` does, for every dtype a
    case can hold, with a NaN or an infinity anywhere, and for an empty or a 0-dim tensor."""
    from rescore.oracle.compare import all_finite

    g = torch.Generator().manual_seed(7)
    for dtype in (torch.float64, torch.float32, torch.float16, torch.bfloat16):
        base = torch.randn(3, 5, generator=g).to(dtype)
        for value in (None, float("nan"), float("inf"), -float("inf")):
            for where in ((0, 0), (2, 4), (1, 2)):
                x = base.clone()
                if value is not None:
                    x[where] = value
                assert bool(all_finite(x)) == bool(torch.isfinite(x).all()), (dtype, value, where)
        assert bool(all_finite(torch.empty(0, dtype=dtype)))
        assert not bool(all_finite(torch.tensor(float("nan"), dtype=dtype)))
    assert bool(all_finite(torch.arange(5))) and bool(all_finite(torch.ones(2, dtype=torch.bool)))
    assert not bool(all_finite(torch.tensor([1 + 1j, complex(float("inf"), 0)])))
    assert bool(all_finite(torch.tensor([1 + 1j, 2j])))
