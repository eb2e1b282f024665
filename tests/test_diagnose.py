"""The diagnosis of a failed case: each kind read from the pattern that defines it, whether or not
the output holds a non-finite value the reference shares (the two paths through `diagnose`), and the
quantile it takes by selection equal to torch's to the bit."""

import pytest
import torch

from rescore.oracle.compare import unravel
from rescore.oracle.diagnose import diagnose, quantile


def _truth(shape=(8, 64)) -> torch.Tensor:
    g = torch.Generator().manual_seed(3)
    return torch.randn(shape, dtype=torch.float64, generator=g) + 0.1


def _bad(out, truth):
    both_nan = torch.isnan(out) & torch.isnan(truth)
    return ~((out - truth).abs() <= 1e-9) & ~both_nan


def _patterns():
    t = _truth()
    g = torch.Generator().manual_seed(4)
    noise = torch.randn(t.shape, dtype=torch.float64, generator=g)
    o = {}
    o["tail_region"] = t.clone()
    o["tail_region"][:, 48:] += 1.0
    o["boundary_row_col"] = t.clone()
    o["boundary_row_col"][:, 0] += 1.0  # the first column (the last row would be a tail too)
    o["constant_factor"] = t * 1.5
    o["constant_offset"] = t + 0.25
    o["sign_dependent"] = torch.where(t < 0, t + noise, t)
    o["magnitude_dependent"] = torch.where(t.abs() > t.abs().median(), t + noise, t)
    o["everywhere"] = t + noise
    o["scattered"] = t.clone()
    picked = torch.arange(7, t.numel(), 5)
    o["scattered"].view(-1)[picked] += noise.view(-1)[: picked.numel()]
    o["nonfinite_leak"] = t.clone()
    o["nonfinite_leak"][3, 5] = float("nan")
    o["nonfinite_dropped"] = t.clone()
    return t, o


@pytest.mark.parametrize("shared_nan", [False, True])
@pytest.mark.parametrize("kind", ["tail_region", "boundary_row_col", "constant_factor", "constant_offset",
                                  "sign_dependent", "magnitude_dependent", "everywhere", "scattered",
                                  "nonfinite_leak", "nonfinite_dropped"])
def test_each_kind_is_read_from_its_pattern(kind, shared_nan):
    t, outs = _patterns()
    t, o = t.clone(), outs[kind].clone()
    if kind == "nonfinite_dropped":
        t[2, 7:40] = float("inf")
    if shared_nan:  # a NaN in both at one place no kind looks at: the masked path, the same kind
        t[4, 20] = o[4, 20] = float("nan")
    assert diagnose(o, t, _bad(o, t)) == kind


def test_nothing_wrong_has_no_diagnosis():
    t = _truth()
    assert diagnose(t.clone(), t, torch.zeros(t.shape, dtype=torch.bool)) == ""


def test_a_zero_dimensional_failure_has_no_place_but_a_kind():
    t = torch.tensor(2.0, dtype=torch.float64)
    assert diagnose(torch.tensor(3.0, dtype=torch.float64), t, torch.tensor(True)) == "everywhere"


@pytest.mark.parametrize("q", [0.0, 0.5, 0.9, 1.0])
def test_the_quantile_by_selection_is_torchs_to_the_bit(q):
    g = torch.Generator().manual_seed(5)
    for n in [1, 2, 3, 10, 11, 1000, 4097]:
        for values in (torch.randn(n, dtype=torch.float64, generator=g),
                       torch.randn(n, generator=g),  # float32: the rank taken in float32, as torch does
                       torch.randint(0, 4, (n,), generator=g).to(torch.float64),  # ties
                       torch.randn(n, dtype=torch.float64, generator=g).abs() * 1e-300,
                       torch.cat([torch.randn(n, dtype=torch.float64, generator=g), torch.tensor([torch.inf])])):
            want, got = torch.quantile(values, q), quantile(values, q)
            same = bool(got == want) or bool(torch.isnan(got) & torch.isnan(want))  # [x, inf] at 1.0: NaN
            assert got.dtype == want.dtype and same, (n, q, want, got)
    with_nan = torch.tensor([1.0, float("nan"), 2.0], dtype=torch.float64)
    assert torch.isnan(quantile(with_nan, 0.5)) and torch.isnan(torch.quantile(with_nan, 0.5))


def test_a_flat_index_unravels_as_torchs():
    for shape in [(7,), (3, 4, 5), (2, 1, 9, 3)]:
        n = torch.Size(shape).numel()
        for flat in range(n):
            assert unravel(flat, torch.Size(shape)) == [int(i) for i in torch.unravel_index(torch.tensor(flat), shape)]
    assert unravel(0, torch.Size([])) == []
