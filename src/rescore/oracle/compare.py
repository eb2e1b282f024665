"""NaN-aware comparison of a candidate's output with the float64 reference.

A NaN or Inf in the output matches the reference's NaN or Inf at the same place; it is also accepted
where the reference module itself, run at the test dtype, produces the same non-finite value (an
overflow the dtype forces is not the kernel's fault). Everything else is compared by magnitude
against a bound `atol + rtol * |truth| + slack`, where `slack` comes from the tolerance policy.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

from rescore.model.outcomes import Outcome
from rescore.oracle.diagnose import diagnose, diagnose_from_counts

_FINITE, _NAN, _POS_INF, _NEG_INF = 0, 1, 2, 3


@dataclass
class Comparison:
    outcome: Outcome  # pass | mismatch | nonfinite
    max_abs_err: float
    max_rel_err: float
    err_ulp: float
    n_elements: int
    n_mismatch: int
    n_nonfinite: int
    first_mismatch: list[int] | None
    atol: float
    rtol: float
    slack: float
    worst_actual: float | None = None
    worst_expected: float | None = None
    diagnosis: str = ""
    output_finite: bool = True  # no NaN or Inf anywhere in the output, wherever the reference has one

    def as_dict(self) -> dict:
        return asdict(self)

    def message(self) -> str:
        """A fixed-format report, in the spirit of torch.testing.assert_close."""
        if self.outcome == Outcome.PASS:
            return f"pass: {self.n_elements} elements, max abs err {self.max_abs_err:.3g} ({self.err_ulp:.3g} ulp)"
        pct = 100.0 * (self.n_mismatch + self.n_nonfinite) / max(self.n_elements, 1)
        lines = [
            f"{self.outcome}: {self.n_mismatch + self.n_nonfinite} / {self.n_elements} elements ({pct:.1f}%)"
            f" differ ({self.n_nonfinite} non-finite where the reference is not, or the reverse)",
            f"greatest absolute difference: {self.max_abs_err:.6g} at index {tuple(self.first_mismatch or ())}"
            f" (allowed {self.atol:.3g} + {self.rtol:.3g}*|ref| + {self.slack:.3g})",
            f"greatest relative difference: {self.max_rel_err:.6g}; {self.err_ulp:.4g} ulp",
            f"pattern: {self.diagnosis}",
        ]
        if self.worst_expected is not None:
            lines.append(f"at that index: got {self.worst_actual!r}, expected {self.worst_expected!r}")
        return "\n".join(lines)


def all_finite(x: torch.Tensor) -> torch.Tensor:
    """Whether every element of `x` is finite, as a 0-dim bool on its device (no wait): its least and
    largest values, NaN carried through, both finite. One reduction, not a mask of the whole tensor:
    a twentieth of `isfinite(x).all()`'s time on a 16M-element float64 output on the CPU."""
    if x.is_complex():  # no order to take the ends of
        return torch.isfinite(x).all()
    if not x.is_floating_point() or x.numel() == 0:
        return torch.ones((), dtype=torch.bool, device=x.device)
    return torch.isfinite(torch.stack(torch.aminmax(x))).all()


def _classes(x: torch.Tensor) -> torch.Tensor:
    c = torch.zeros(x.shape, dtype=torch.int8, device=x.device)
    c[torch.isnan(x)] = _NAN
    c[x == math.inf] = _POS_INF
    c[x == -math.inf] = _NEG_INF
    return c


_EXPONENT_BITS = 0x7FF0000000000000  # of a float64: masked so, it is the power of two at or below its value


def ulp_of(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The spacing of `dtype` at |t| (floored at the smallest normal), in float64, for finite `t`: the
    power of two at or below |t| (its float64 exponent, exactly) times `dtype`'s epsilon. Read off the
    bits, not through log2, which rounds to the next power just below one (2x the spacing there) and
    took most of a comparison's time on a half-million-element output."""
    info = torch.finfo(dtype)
    mag = t.abs().to(torch.float64).clamp_min(float(info.smallest_normal))
    return (mag.view(torch.int64) & _EXPONENT_BITS).view(torch.float64) * float(info.eps)


# Past this many elements a comparison runs in chunks: the one-pass form holds about ten float64
# copies of the output at once (160 GiB for a 2^31-element trigger, more than an H200 has).
CHUNK_ELEMENTS = 1 << 24


def _judge_elements(o: torch.Tensor, t: torch.Tensor, dtype: torch.dtype, atol: float, rtol: float,
                    slack: float | torch.Tensor, ref_lowp: torch.Tensor | None, finite: bool):
    """Elementwise judgement of float64 `o` against float64 `t`: (err, mismatch, nonfinite, rel,
    ulps). Where both are finite everywhere (nearly every case) the classes of values need no
    comparing and `nonfinite` is None: the same judgement in a third of the passes over the output
    (a benchmark-sized output holds 2^26 elements, and judging it took a minute of CPU). There a
    zero |truth| gives 0/0 = NaN where the error is 0 (relative error 0) and x/0 = inf where it is not.
    `finite`: whether `o` and `t` are both finite everywhere (the caller's, which reads it)."""
    if finite:
        err = (o - t).abs()
        tabs = t.abs()
        mismatch = err > atol + rtol * tabs + slack
        rel = (err / tabs).nan_to_num_(nan=0.0, posinf=math.inf)
        return err, mismatch, None, rel, err / ulp_of(t, dtype)
    co = _classes(o)
    ok_class = (co == _classes(t)) | (co == _classes(t.to(dtype).to(torch.float64)))
    if ref_lowp is not None:
        ok_class |= co == _classes(ref_lowp.detach().to(torch.float64))
    both_finite = (co == _FINITE) & torch.isfinite(t)
    err = torch.where(both_finite, (o - t).abs(), torch.zeros((), dtype=torch.float64, device=o.device))
    bound = atol + rtol * t.abs() + slack
    mismatch = both_finite & (err > bound)
    nonfinite = ~ok_class & ~both_finite
    tabs = torch.where(both_finite, t.abs(), torch.ones((), dtype=torch.float64, device=o.device))
    rel = torch.where(tabs > 0, err / tabs, torch.where(err > 0, torch.full_like(err, math.inf), err))
    ulps = torch.where(both_finite, err / ulp_of(torch.where(both_finite, t, torch.ones_like(t)), dtype), err)
    return err, mismatch, nonfinite, rel, ulps


def compare(
    out: torch.Tensor,
    truth: torch.Tensor,
    dtype: torch.dtype,
    atol: float,
    rtol: float,
    slack: float | torch.Tensor = 0.0,
    ref_lowp: torch.Tensor | None = None,
) -> Comparison:
    """Compare `out` (any float dtype) with `truth` (float64) elementwise; shapes must already match.
    `slack` is a number or a tensor of `truth`'s shape (a linear op's terms); the Comparison
    reports it at the worst element (else its largest value).

    The worst element is the first non-finite one, else the largest error. Past CHUNK_ELEMENTS
    the judgement runs a chunk of the flat order at a time, with the same counts, maxima and worst
    element; the diagnosis is then read from counts and the first wrong element
    (`diagnose_from_counts`) instead of the whole pattern (`diagnose`)."""
    n = out.numel()
    of, tf = out.detach().reshape(-1), truth.detach().reshape(-1)
    lf = ref_lowp.detach().reshape(-1) if ref_lowp is not None else None
    sf = slack.reshape(-1) if isinstance(slack, torch.Tensor) else None
    n_mismatch = n_nonfinite = leak = dropped = bad_at_nonfinite_truth = finite_bad = 0
    max_abs = max_rel = max_ulp = 0.0
    first_bad = first_nonfinite = worst_mismatch = None  # flat indices
    worst_mismatch_err = -1.0
    whole = None  # (out, truth, wrong, both finite everywhere) of a tensor judged in one chunk, for `diagnose`
    output_finite = True
    for start in range(0, n, CHUNK_ELEMENTS):
        part = slice(start, start + CHUNK_ELEMENTS)
        o, t = of[part].to(torch.float64), tf[part].to(torch.float64)
        # Each read of a device's value waits for the device, and on a GPU shared by many workers
        # each wait is long: a chunk's figures are read together, once they are all computed.
        o_finite, t_finite = torch.stack([all_finite(o), all_finite(t)]).tolist()
        output_finite &= o_finite
        err, mismatch, nonfinite, rel, ulps = _judge_elements(
            o, t, dtype, atol, rtol, sf[part] if sf is not None else slack, lf[part] if lf is not None else None,
            o_finite and t_finite)
        counts = [mismatch.sum()] + ([nonfinite.sum()] if nonfinite is not None else [])
        values = torch.stack([c.to(torch.float64) for c in counts] + [err.max(), rel.max(), ulps.max()]).tolist()
        wrong, wrong_nonfinite = int(values[0]), int(values[1]) if nonfinite is not None else 0
        chunk_abs, chunk_rel, chunk_ulp = values[-3:]
        n_mismatch += wrong
        max_abs, max_rel = max(max_abs, chunk_abs), max(max_rel, chunk_rel)
        max_ulp = max(max_ulp, chunk_ulp)
        if nonfinite is None:
            if not wrong:
                continue
            nonfinite, bad = torch.zeros_like(mismatch), mismatch
        else:
            n_nonfinite += wrong_nonfinite
            bad = mismatch | nonfinite
            if not wrong and not wrong_nonfinite:  # no element wrong, none of a wrong class
                continue
        if n <= CHUNK_ELEMENTS:
            whole = (o.reshape(out.shape), t.reshape(out.shape), bad.reshape(out.shape), o_finite and t_finite)
        if first_bad is None:
            first_bad = start + int(torch.argmax(bad.to(torch.uint8)))
        if first_nonfinite is None and wrong_nonfinite:
            first_nonfinite = start + int(torch.argmax(nonfinite.to(torch.uint8)))
        if wrong:
            scored = torch.where(mismatch, err, torch.full_like(err, -1.0))
            i = int(torch.argmax(scored))  # the first of equal errors
            if float(scored[i]) > worst_mismatch_err:
                worst_mismatch_err, worst_mismatch = float(scored[i]), start + i
        if whole is None:
            t_fin, o_fin = torch.isfinite(t), torch.isfinite(o)
            leak += int((bad & t_fin & ~o_fin).sum())
            dropped += int((bad & ~t_fin & o_fin).sum())
            bad_at_nonfinite_truth += int((bad & ~t_fin).sum())
            finite_bad += int((bad & t_fin & o_fin).sum())
    if n_nonfinite:
        outcome, flat = Outcome.NONFINITE, first_nonfinite
    elif n_mismatch:
        outcome, flat = Outcome.MISMATCH, worst_mismatch
    else:
        outcome, flat = Outcome.PASS, None
    first = actual = expected = None
    diagnosis = ""
    if flat is not None:
        first = unravel(flat, out.shape)
        actual, expected = float(of[flat]), float(tf[flat])
        diagnosis = diagnose(*whole) if whole is not None else diagnose_from_counts(
            first_bad, n_mismatch + n_nonfinite, n, leak, dropped, bad_at_nonfinite_truth, finite_bad)
    if sf is not None:
        slack = float(sf[flat]) if flat is not None else (float(sf.max()) if n else 0.0)
    return Comparison(diagnosis=diagnosis, outcome=outcome, max_abs_err=max_abs, max_rel_err=max_rel,
                      err_ulp=max_ulp, n_elements=n, n_mismatch=n_mismatch, n_nonfinite=n_nonfinite,
                      first_mismatch=first, atol=atol, rtol=rtol, slack=slack, worst_actual=actual,
                      worst_expected=expected, output_finite=output_finite)


def unravel(flat: int, shape: torch.Size) -> list[int]:
    """The index in `shape` of flat (row-major) index `flat`. Not `torch.unravel_index`, whose first
    call in a process imports sympy (most of a second)."""
    index = []
    for size in reversed(shape):
        flat, i = divmod(flat, size)
        index.append(i)
    return index[::-1]


def max_finite_error(approx: torch.Tensor, truth: torch.Tensor) -> float:
    """Largest |approx - truth| over the elements where both are finite (0 when there are none)."""
    if approx.numel() > CHUNK_ELEMENTS:
        a, t = approx.detach().reshape(-1), truth.detach().reshape(-1)
        return max(max_finite_error(a[i : i + CHUNK_ELEMENTS], t[i : i + CHUNK_ELEMENTS])
                   for i in range(0, a.numel(), CHUNK_ELEMENTS))
    a = approx.detach().to(torch.float64)
    t = truth.detach().to(torch.float64)
    if not a.numel():
        return 0.0
    err = (a - t).abs()
    every, top = torch.stack([(all_finite(a) & all_finite(t)).to(torch.float64), err.max()]).tolist()  # one read
    if every:  # nearly every case: no mask to apply
        return top
    both = torch.isfinite(a) & torch.isfinite(t)
    if not bool(both.any()):
        return 0.0
    return float(err[both].max())


def max_abs_finite(x: torch.Tensor) -> float:
    """Largest finite |x| (0 when there is none), a chunk at a time past CHUNK_ELEMENTS."""
    flat = x.detach().reshape(-1)
    top = 0.0
    for i in range(0, flat.numel(), CHUNK_ELEMENTS):
        part = flat[i : i + CHUNK_ELEMENTS].to(torch.float64)
        every, largest = torch.stack([all_finite(part).to(torch.float64), part.abs().max()]).tolist()  # one read
        if not every:
            part = part[torch.isfinite(part)]
            largest = float(part.abs().max()) if part.numel() else 0.0
        top = max(top, largest)
    return top
