"""Diagnosis: why a case failed, read from the mismatch mask and the error pattern.

Kinds (one per case, the first that fits, in this order):
  nonfinite_leak      NaN/Inf where the reference is finite (unwritten output shows as NaN: the
                      worker fills fresh memory with NaN)
  nonfinite_dropped   finite where the reference is NaN/Inf (a max/min that drops NaN, ...)
  tail_region         every mismatch lies past a block boundary along the last dim or the flat
                      index (the elements past the last full block)
  boundary_row_col    every mismatch lies in the first or last row or column
  constant_factor     out / ref is the same constant (not 1) on every mismatch, or per row
  constant_offset     out - ref is the same constant on every mismatch
  sign_dependent      mismatches only where the reference is negative (or only positive)
  magnitude_dependent mismatches only among the largest magnitudes of the reference
  everywhere          (almost) every element is wrong, with no simpler pattern
  scattered           none of the above
A tensor past `compare.CHUNK_ELEMENTS` gets only the kinds its counts can tell
(`diagnose_from_counts`). Kinds the executor adds: `out_of_bounds` (a crash: under the
interpreter a load or store outside every tensor argument, stopped by `runtime/interpreter.py`),
and the submission-level `growing_with_reduction` and `nondeterministic` (with the study).
"""

from __future__ import annotations

import math

import numpy as np
import torch

MIN_BLOCK = 16


def quantile(values: torch.Tensor, q: float) -> torch.Tensor:
    """`torch.quantile(values, q)` (linear interpolation; NaN if any value is), the same bits, for a
    1-D CPU tensor: the two order statistics it interpolates found by selection, not by sorting
    every value (the sort was most of a mismatch's judgement on a million-element output)."""
    if bool(values.isnan().any()):
        return torch.tensor(float("nan"), dtype=values.dtype)
    rank = torch.tensor(q, dtype=values.dtype) * (values.numel() - 1)  # in the values' dtype, as torch's
    below, above = int(rank), math.ceil(float(rank))  # equal at a whole rank
    picked = np.partition(values.numpy(), [below, above])
    low, high = (torch.tensor(picked[i], dtype=values.dtype) for i in (below, above))
    return torch.lerp(low, high, rank - below)


def _spread(values: torch.Tensor) -> tuple[float, float]:
    """(median, the 90th percentile of the distance to it): robust to a few noisy elements."""
    centre = values.median()
    dist = (values - centre).abs()
    return float(centre), float(quantile(dist, 0.9) if values.numel() > 10 else dist.max())


SAME_REL = 1e-2  # nine in ten values within this share of their median are "the same"


def _within(centre: float, spread: float, rel: float = SAME_REL) -> bool:
    """A spread (`_spread`) within `rel` of its median (rounding noise on near-zero references aside)."""
    return spread <= rel * max(abs(centre), 1e-30)


def _all_same(values: torch.Tensor, rel: float = SAME_REL) -> bool:
    """Nine in ten values within `rel` of their median."""
    return values.numel() >= 2 and _within(*_spread(values), rel)


def _constant_factor(ratio: torch.Tensor) -> bool:
    """out/ref is one constant (`_all_same`), and that constant stands clear of 1 (not rounding noise
    around 1). The spread is read once: on a 3-million-element output each read is two selections."""
    if ratio.numel() < 2:
        return False
    centre, spread = _spread(ratio)
    return _within(centre, spread) and abs(centre - 1.0) > max(1e-3, 10 * spread)


def _past_block(index: torch.Tensor, length: int) -> bool:
    """All indices >= some start > 0 that is a multiple of MIN_BLOCK, and not all of the axis."""
    if index.numel() == 0 or length <= MIN_BLOCK:
        return False
    start = int(index.min())
    return start > 0 and start % MIN_BLOCK == 0 and start < length


def diagnose(out: torch.Tensor, truth: torch.Tensor, bad: torch.Tensor, finite_everywhere: bool | None = None) -> str:
    """The kind of a failure; `bad` marks the elements judged wrong (mismatch or non-finite).
    `finite_everywhere`: whether the output and the truth are both finite everywhere, where the caller
    has read it already (`compare` has), else read here. There (nearly every failure) the masks of
    finite elements are left out: the same kinds in fewer passes over the output."""
    o = out.detach().to(torch.float64).cpu()
    t = truth.detach().to(torch.float64).cpu()
    bad = bad.cpu()
    n_bad = int(bad.sum())
    if not n_bad:
        return ""
    if finite_everywhere is None:
        finite_everywhere = bool((torch.isfinite(t) & torch.isfinite(o)).all())
    if not finite_everywhere:
        t_fin, o_fin = torch.isfinite(t), torch.isfinite(o)
        finite = t_fin & o_fin
        if bool((bad & t_fin & ~o_fin).any()) and not bool((bad & finite).any()):
            return "tail_region" if _spatial(bad, o.shape) == "tail_region" else "nonfinite_leak"
        if bool((bad & ~t_fin).any()) and int((bad & ~t_fin & o_fin).sum()) * 2 >= n_bad:
            return "nonfinite_dropped"
    spatial = _spatial(bad, o.shape)
    if spatial:
        return spatial
    tabs = t.abs()
    bad_finite = bad if finite_everywhere else bad & finite
    both = bad_finite & (tabs > 1e-12)
    o_both, t_both = o[both], t[both]
    if o_both.numel() >= 2:
        if _constant_factor(o_both / t_both):
            return "constant_factor"
        if o.dim() >= 2 and _row_scaled(o, t, bad):
            return "constant_factor"
        if _all_same(o_both - t_both):
            return "constant_offset"
    if n_bad < (o.numel() if finite_everywhere else int(finite.sum())):
        neg, pos = t < 0, t > 0
        if bool(neg.any() & pos.any()):
            if not bool((bad_finite & pos).any()) and bool((bad & neg).any()):
                return "sign_dependent"
            if not bool((bad_finite & neg).any()) and bool((bad & pos).any()):
                return "sign_dependent"
        mags = tabs.reshape(-1) if finite_everywhere else tabs[finite]
        if mags.numel() >= 8:
            cut = quantile(mags, 0.5)
            if not bool((bad_finite & (tabs <= cut)).any()):
                return "magnitude_dependent"
    if n_bad >= 0.9 * bad.numel():
        return "everywhere"
    return "scattered"


def diagnose_from_counts(first_bad: int, n_bad: int, n: int, leak: int, dropped: int,
                         bad_at_nonfinite_truth: int, finite_bad: int) -> str:
    """The kind of a failure of a tensor too large to hold its pattern (a 2^31-element trigger),
    from counts over the wrong elements and the flat index of the first: the kinds of `diagnose`
    that need no more (non-finite leaks and drops, a tail past a block along the flat index,
    everywhere, scattered)."""
    if leak and not finite_bad:
        return "tail_region" if _past_block(torch.tensor([first_bad]), n) else "nonfinite_leak"
    if bad_at_nonfinite_truth and dropped * 2 >= n_bad:
        return "nonfinite_dropped"
    if _past_block(torch.tensor([first_bad]), n):
        return "tail_region"
    return "everywhere" if n_bad >= 0.9 * n else "scattered"


def _spatial(bad: torch.Tensor, shape: torch.Size) -> str:
    """`tail_region` or `boundary_row_col` from where the wrong elements lie, else ""; each element's
    row and column read off its flat index (one pass to find them)."""
    if bool(bad.all()):  # index 0 is wrong, and every row and column: neither a tail nor a boundary
        return ""
    flat = bad.reshape(-1).nonzero().reshape(-1)
    if flat.numel() == 0:
        return ""
    cols = flat % shape[-1] if len(shape) >= 1 else flat
    if len(shape) >= 1 and _past_block(cols, shape[-1]):
        return "tail_region"
    if _past_block(flat, bad.numel()):
        return "tail_region"
    if len(shape) >= 2 and shape[-1] > 2 and shape[-2] > 2:
        rows = (flat // shape[-1]) % shape[-2]
        for axis, n in ((rows, shape[-2]), (cols, shape[-1])):
            if bool((axis == 0).all()) or bool((axis == n - 1).all()):
                return "boundary_row_col"
    return ""


def _row_scaled(o: torch.Tensor, t: torch.Tensor, bad: torch.Tensor) -> bool:
    """Each row with a mismatch is the reference times one constant of its own (a wrong normaliser)."""
    o2 = o.reshape(-1, o.shape[-1])
    t2 = t.reshape(-1, t.shape[-1])
    b2 = bad.reshape(-1, bad.shape[-1])
    rows = b2.any(dim=1).nonzero().reshape(-1)
    if rows.numel() == 0:
        return False
    for r in rows[:16].tolist():
        ok = torch.isfinite(o2[r]) & torch.isfinite(t2[r]) & (t2[r].abs() > 1e-12)
        if int(ok.sum()) < 2 or not _constant_factor(o2[r][ok] / t2[r][ok]):
            return False
    return True
