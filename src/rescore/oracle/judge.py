"""Judging a case: the candidate's output against the float64 truth and the low-precision reference,
and a GPU's second run on the same input against the first.

Every message here is a `reason` cell of the cases table: changing one changes the tables.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import torch

from rescore.model.outcomes import Outcome
from rescore.oracle.compare import compare, max_abs_finite, max_finite_error
from rescore.oracle.reference import flatten, structural_truth
from rescore.oracle.tolerance import DEFAULT_POLICY, FIXED_POLICIES, policy_ratios

Place = Callable[..., tuple]


def as_is(*groups: list | None) -> tuple:
    """The tensors where they are (a CPU case is judged where it ran)."""
    return groups


def judge(out, truths: list, lowps: list | None, cand_inputs: list, before: list, tdtype: torch.dtype, dtype: str,
          reduction_len: int, structural: list | None = None, terms: list | None = None, *, device: str,
          overrides: dict | None, place: Place = as_is) -> dict:
    """The verdict of a candidate's output against the truth: its form (plain tensors, shapes, dtypes,
    device), inputs it wrote, then each output's values (`judge_one`); the worst one is the case's.
    `place` puts the tensors where they are judged (the worker's `placement.judged_where`)."""
    outs = flatten(out)
    if outs is None or len(outs) != len(truths):
        return {
            "outcome": Outcome.BAD_OUTPUT,
            "reason": f"expected {len(truths)} plain tensor(s), got {type(out).__name__}",
        }
    for o, t, lp in zip(outs, truths, lowps or [None] * len(truths)):
        want_dtype = lp.dtype if lp is not None else (tdtype if t.is_floating_point() else t.dtype)
        if o.shape != t.shape:
            return {"outcome": Outcome.BAD_OUTPUT, "reason": f"shape {tuple(o.shape)} != {tuple(t.shape)}"}
        if o.dtype != want_dtype:
            return {"outcome": Outcome.BAD_OUTPUT, "reason": f"dtype {o.dtype} != {want_dtype}"}
        if o.device.type != device:
            return {"outcome": Outcome.BAD_OUTPUT, "reason": f"device {o.device} != {device}"}
    outs, truths, lowps, structural, terms, cand_inputs, before = place(
        outs, truths, lowps, structural, terms, cand_inputs, before)
    truths = [structural_truth(o, t, st) for o, t, st in zip(outs, truths, structural or [None] * len(truths))]
    for i, (x, x0) in enumerate(zip(cand_inputs, before)):
        if isinstance(x, torch.Tensor) and not same(x, x0):
            return {"outcome": Outcome.MUTATED_INPUT, "reason": f"input {i} was written by the candidate"}
    verdicts = [judge_one(o, t, lp, tdtype, dtype, reduction_len, ts, overrides)
                for o, t, lp, ts in zip(outs, truths, lowps or [None] * len(truths), terms or [None] * len(truths))]
    worst = next((v for v in verdicts if v["outcome"] != Outcome.PASS), verdicts[0])
    worst["output_nonfinite"] = any(v["output_nonfinite"] for v in verdicts)
    ratios: dict[str, float] = {}
    for v in verdicts:
        for name, r in v.pop("ratios").items():
            ratios[name] = max(ratios.get(name, 0.0), r)
    worst["policy_ratios"] = json.dumps(ratios, sort_keys=True)
    return worst


def judge_rerun(out, again, truths: list, lowps: list | None, tdtype: torch.dtype, dtype: str, reduction_len: int,
                verdict: dict, structural: list | None = None, terms: list | None = None, *, device: str,
                overrides: dict | None, place: Place = as_is) -> dict:
    """The second run on the same input is judged against the truth like the first. Two runs may
    differ in their last bits (a correct kernel that accumulates with atomics adds in whatever
    order the programs finish), so only a second run that fails its own judgement, or returns
    another shape, makes the case fail: `nondeterministic` (a race, or memory nothing wrote)."""
    a, b = flatten(out), flatten(again)
    if b is None or len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b)):
        return dict(verdict, outcome=Outcome.BAD_OUTPUT, reason="a second run on the same input returned another shape",
                    diagnosis="nondeterministic")
    host_a, host_b = place(a, b)
    differ = sum(unequal(x, y) for x, y in zip(host_a, host_b))
    if not differ:  # the same bits: the same verdict, without judging again
        return verdict
    second = judge(again, truths, lowps, [], [], tdtype, dtype, reduction_len, structural, terms, device=device,
                   overrides=overrides, place=place)
    if second["outcome"] == Outcome.PASS:
        return verdict
    return dict(second, diagnosis="nondeterministic",
                reason=f"nondeterministic: the first run passed, a second run on the same input differs from "
                       f"it in {differ} elements and fails: {second.get('reason', '')}"[:1000])


def judge_one(o: torch.Tensor, t: torch.Tensor, lp: torch.Tensor | None, tdtype: torch.dtype, dtype: str,
              reduction_len: int, terms: torch.Tensor | None = None, overrides: dict | None = None) -> dict:
    """One output against its truth: an integer output exactly, a floating one within the default
    policy's bound (`oracle.compare`), with the ratio to each policy's bound. `output_nonfinite`
    records whether the output held a NaN or Inf at all, wherever the reference has one too: the
    gpuemu papers' validator failed any such output, and their tables are rebuilt from it."""
    if not o.is_floating_point():
        wrong = int((o.cpu() != t.to(o.dtype).cpu()).sum())
        r = 0.0 if not wrong else float("inf")
        return {"outcome": Outcome.MISMATCH if wrong else Outcome.PASS, "n_elements": o.numel(), "n_mismatch": wrong,
                "output_nonfinite": False,
                "max_abs_err": r, "reason": f"{wrong} of {o.numel()} integer elements differ" if wrong else "",
                "diagnosis": "scattered" if wrong else "",
                "ratios": {n: r for n in [*FIXED_POLICIES, "reference-lowp", "calibrated-base"]}}
    lowp_err = max_finite_error(lp, t) if lp is not None else 0.0
    atol, rtol, slack = DEFAULT_POLICY.bound(dtype, lowp_err, overrides)
    if terms is not None:  # a linear op: rounding error in proportion to the terms summed
        slack = slack + DEFAULT_POLICY.terms_slack(dtype, terms)
    cmp = compare(o, t, tdtype, atol, rtol, slack, lp)
    return {
        "outcome": cmp.outcome,
        "reason": "" if cmp.outcome == Outcome.PASS else cmp.message(),
        "diagnosis": cmp.diagnosis,
        "max_abs_err": cmp.max_abs_err,
        "max_rel_err": cmp.max_rel_err,
        "err_ulp": cmp.err_ulp,
        "n_elements": cmp.n_elements,
        "n_mismatch": cmp.n_mismatch + cmp.n_nonfinite,
        "first_mismatch": json.dumps(cmp.first_mismatch) if cmp.first_mismatch is not None else None,
        "atol": atol,
        "rtol": rtol,
        "bound": cmp.slack,
        "ref_lowp_err": lowp_err,
        "ref_max_abs": max_abs_finite(t),
        "output_nonfinite": not cmp.output_finite,
        "ratios": policy_ratios(o, t, dtype, slack, reduction_len, cmp.n_nonfinite > 0, (atol, rtol)),
    }


def unequal(a: torch.Tensor, b: torch.Tensor) -> int:
    """Elements where two same-shape tensors differ (NaN equals NaN)."""
    if a.is_floating_point():
        return int((~((a == b) | (torch.isnan(a) & torch.isnan(b)))).sum())
    return int((a != b).sum())


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and unequal(a, b) == 0
