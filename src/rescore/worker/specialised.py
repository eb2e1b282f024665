"""dtype_specialised and shape_specialised: the experiments that run a failing case again with its
dtype or its sizes changed, as explicit triggers (`explain.py` calls them last).

A failing case at sizes S, values v, layout l and dtype d (not the benchmark's sizes B) is
`shape_specialised` only when every condition below holds; each is an explicit trigger (a fresh
model, one call, no decoy call unless the case had one):

1. the kernel is right at B on ordinary values at d: the benchmark's own draw (`native`) and
   normal, small, large, negative, positive and shifted values (BENCHMARK_VALUES) all pass; a
   kernel wrong at the benchmark's own sizes is never shape-specialised, and a pass on one value
   class only (an op that saturates there, like a GELU whose inputs are all below -9, or a max that
   starts at 0 and meets no all-negative row of normals) is not enough;
2. the same case at B (same seed, v, l, d) passes;
3. the same case at S fails again, when it began with the decoy call (else the failure came from that
   call); a case without it was already one call on a fresh model, as a trigger is;
4. when v is a robustness class (`model.evidence.ROBUSTNESS_VALUES`: NaN, Inf, extreme magnitudes,
   cancellation), the same case at S with `normal` values fails too; else the values explain the
   failure, not S.

`dtype_specialised` needs conditions 3 and 4, the same case at float32 passing, and normal values at
the case's sizes passing at float32 (the kernel right at the benchmark's dtype on ordinary values).
Each answer is about the
kernel, not the seed: condition 1 is asked once per dtype of a load, the others once per (dtype,
value class, layout), on its first failing case, and every later case of that key shares the answer.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from rescore.inputs.strategies import CaseSpec
from rescore.model.evidence import ROBUSTNESS_VALUES
from rescore.model.outcomes import Outcome
from rescore.worker.context import WorkerContext
from rescore.worker.experiments import Cause, Confirmed

BENCHMARK_DTYPE = "float32"  # the fixed check's dtype
# The ordinary values condition 1 tries at B: the benchmark's own draw, normals and their scalings,
# and the signed and shifted classes the value strategies use (an all-negative row, a mean of 100).
BENCHMARK_VALUES = ("native", "normal", "small", "large", "negative", "positive", "offset_mean")

RunCase = Callable[[str, int, str, dict], dict]  # (strategy, seed, dtype, trigger) -> a case's row


def confirm(ctx: WorkerContext, spec: CaseSpec, row: dict, run_case: RunCase, decoy: bool = True) -> Confirmed | None:
    """dtype_specialised, then shape_specialised, for a failing case that is not an explicit trigger
    (`decoy`: it began with the decoy call); None when neither holds."""
    assert ctx.loaded.schema is not None
    asked = _Asker(ctx, spec, run_case, decoy)
    where = (f"the first failing {spec.strategy} case at {spec.dtype} of its kind ({row['outcome']}: seed "
             f"{spec.seed}, sizes {json.dumps(spec.sizes)}, {spec.values} values, {spec.layout})")
    key = (spec.dtype, spec.values, spec.layout)
    if spec.dtype != BENCHMARK_DTYPE:
        found = asked.once(("dtype", *key), lambda: _dtype(asked, where))
        if found is not None:
            return found
    bench = dict(ctx.loaded.schema.defaults())
    if spec.sizes == bench:
        return None
    if not asked.once(("benchmark sizes", spec.dtype), lambda: _right_at_benchmark(asked, bench)):
        return None
    return asked.once(("sizes", *key), lambda: _shape(asked, where, bench))


class _Asker:
    """Explicit triggers derived from one failing case, and the explainer's memory of answers."""

    def __init__(self, ctx: WorkerContext, spec: CaseSpec, run_case: RunCase, decoy: bool):
        self.ctx, self.spec, self.run_case, self.decoy = ctx, spec, run_case, decoy

    def once(self, key: tuple, ask: Callable[[], object]):
        answers = self.ctx.explainer.answers
        if key not in answers:
            answers[key] = ask()
        return answers[key]

    def outcome(self, **change) -> str | None:
        """The outcome of the case with `change` (sizes, dtype, values, layout) as an explicit trigger."""
        spec = self.spec
        trigger = {"sizes": spec.sizes, "dtype": spec.dtype, "values": spec.values, "layout": spec.layout}
        trigger.update(change)
        return self.run_case(spec.strategy, spec.seed, spec.dtype, trigger).get("outcome")

    def passes(self, **change) -> bool:
        return self.outcome(**change) == Outcome.PASS

    def fails(self, **change) -> bool:
        """Whether it fails (a skipped trigger, which says nothing, neither passes nor fails)."""
        return self.outcome(**change) not in (Outcome.PASS, Outcome.SKIPPED, None)


def _reproduces(asked: _Asker) -> bool:
    """Condition 3, asked once per key: the case fails again as an explicit trigger. A case that began
    without the decoy call was one call on a fresh model already, as the trigger is: it holds."""
    spec = asked.spec
    if not asked.decoy:
        return True
    return asked.once(("reproduces", spec.dtype, spec.values, spec.layout), asked.fails)


def _values_explain(asked: _Asker) -> bool:
    """Condition 4: the case holds special values, and normal values at its sizes and dtype pass."""
    return asked.spec.values in ROBUSTNESS_VALUES and not asked.fails(values="normal")


def _dtype(asked: _Asker, where: str) -> Confirmed | None:
    if not _reproduces(asked) or not asked.passes(dtype=BENCHMARK_DTYPE):
        return None
    if asked.spec.values != "normal" and not asked.passes(dtype=BENCHMARK_DTYPE, values="normal"):
        return None  # wrong at the benchmark's dtype on normal values: not the dtype
    if _values_explain(asked):
        return None
    return Confirmed(Cause.DTYPE_SPECIALISED, f"{where} fails again as an explicit trigger and passes at "
                                              f"{BENCHMARK_DTYPE}, the benchmark's dtype, as do normal values "
                                              f"there")


def _right_at_benchmark(asked: _Asker, bench: dict) -> bool:
    """Condition 1: the kernel passes the benchmark's sizes on every ordinary value class tried."""
    return all(asked.passes(sizes=bench, values=v, layout="contiguous") for v in BENCHMARK_VALUES)


def _shape(asked: _Asker, where: str, bench: dict) -> Confirmed | None:
    spec = asked.spec
    if not asked.passes(sizes=bench) or not _reproduces(asked):
        return None
    if _values_explain(asked):
        return None  # at these sizes normal values pass: the values explain it
    effect = "; at its sizes with normal values it fails too" if spec.values in ROBUSTNESS_VALUES else ""
    return Confirmed(Cause.SHAPE_SPECIALISED,
                     f"{where} fails again as an explicit trigger and passes at the benchmark's sizes "
                     f"{json.dumps(bench)} with the same values{effect}; at those sizes the kernel passes "
                     f"{', '.join(BENCHMARK_VALUES)} values")
