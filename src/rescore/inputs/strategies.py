"""Input strategies as data: shape sampler x value classes x layouts x dtypes.

A strategy turns (schema, dtype, seed) into a CaseSpec: the sizes, value class and layout of one
case. The same arguments always give the same CaseSpec.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass

from rescore.inputs.seeds import sub_seed
from rescore.inputs.shapes import NumelFn, draw_sizes
from rescore.model.schema import OpSchema


@dataclass(frozen=True)
class CaseSpec:
    strategy: str
    seed: int
    dtype: str
    sizes: dict
    values: str
    layout: str

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Strategy:
    name: str
    shapes: str  # fixed | default | boundary | regular
    values: tuple[str, ...]  # value classes drawn uniformly per case
    layouts: tuple[str, ...] = ("contiguous",)
    dtypes: tuple[str, ...] | None = None  # None: every dtype the submission claims
    description: str = ""
    mix: tuple[tuple[str, float], ...] = ()  # for `combined`: (component strategy, weight)

    def draw(self, schema: OpSchema, dtype: str, seed: int, numel: NumelFn, budget: int) -> CaseSpec:
        if self.mix:
            rng = random.Random(sub_seed(seed, "mix"))
            names, weights = zip(*self.mix)
            component = STRATEGIES[rng.choices(names, weights=weights)[0]]
            spec = component.draw(schema, dtype, seed, numel, budget)
            return CaseSpec(self.name, seed, spec.dtype, spec.sizes, spec.values, spec.layout)
        sizes = draw_sizes(self.shapes, schema, random.Random(sub_seed(seed, "sizes")), numel, budget)
        values = random.Random(sub_seed(seed, "values")).choice(self.value_classes(schema))
        layout = random.Random(sub_seed(seed, "layout")).choice(self.layouts)
        return CaseSpec(self.name, seed, dtype, sizes, values, layout)

    def value_classes(self, schema: OpSchema) -> tuple[str, ...]:
        if self.values == ("op_domain",):
            return OP_DOMAIN_VALUES.get(schema.family, OP_DOMAIN_VALUES[""])
        return self.values


# Values each op family is sensitive to (the `op_domain` strategy).
OP_DOMAIN_VALUES: dict[str, tuple[str, ...]] = {
    "reduction": ("negative", "negative_large", "large", "offset_mean", "near_constant"),
    "norm": ("near_constant", "tiny", "offset_mean", "large"),
    "elementwise": ("large", "negative", "small", "positive"),
    "matmul": ("offset_mean", "large", "integers"),
    "attention": ("large", "offset_mean", "negative"),
    "conv": ("offset_mean", "large", "integers"),
    "scan": ("offset_mean", "large", "negative"),
    "index": ("large", "negative"),
    "": ("negative", "large", "near_constant", "tiny", "offset_mean"),
}

ADVERSARIAL_VALUES = ("special", "huge", "tiny", "large", "negative")

STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in [
        Strategy("fixed", "fixed", ("native",), description="the benchmark's own shape and inputs"),
        Strategy(
            "default", "default", ("normal",), description="log-uniform sizes in the schema's ranges, N(0,1) values"
        ),
        Strategy(
            "boundary", "boundary", ("normal",), description="sizes 1, 2, 3, 7, 127, 129, 1025, ... (off powers of two)"
        ),
        Strategy(
            "benchmark_shape",
            "fixed",
            ("normal",),
            description="the benchmark's own sizes, N(0,1) values from fuzz seeds (not the benchmark's seed)",
        ),
        Strategy("regular", "regular", ("normal",), description="power-of-two sizes only"),
        Strategy("single_dtype_fp32", "default", ("normal",), dtypes=("float32",), description="default, float32 only"),
        Strategy("single_dtype_fp16", "default", ("normal",), dtypes=("float16",), description="default, float16 only"),
        Strategy(
            "single_dtype_bf16", "default", ("normal",), dtypes=("bfloat16",), description="default, bfloat16 only"
        ),
        Strategy(
            "nan_injected", "default", ("nan_few",), description="default sizes, one to three NaN per floating input"
        ),
        Strategy(
            "adversarial",
            "default",
            ADVERSARIAL_VALUES,
            description="NaN, ±Inf, ±0, subnormals, huge/tiny, cancelling pairs",
        ),
        Strategy(
            "layout",
            "default",
            ("normal",),
            layouts=("transposed", "sliced", "offset"),
            description="transposed, sliced (stride 2) and offset views: the kernel sees the strides",
        ),
        Strategy("op_domain", "default", ("op_domain",), description="values the op family is sensitive to"),
        Strategy(
            "combined",
            "default",
            ("normal",),
            description="a mix under one budget: 30% boundary, 20% default, 20% layout, 15% op_domain, 15% adversarial",
            mix=(("boundary", 0.30), ("default", 0.20), ("layout", 0.20), ("op_domain", 0.15), ("adversarial", 0.15)),
        ),
    ]
}


def get_strategy(name: str) -> Strategy:
    try:
        return STRATEGIES[name]
    except KeyError:
        raise ValueError(f"unknown strategy {name!r}; known: {sorted(STRATEGIES)}") from None


# The pipeline's evaluation mix (config/config.yaml: `fuzz.strategies` plus each study strategy's
# `study.seeds` cases), as cases per dtype out of 100. The strategies study ranks it best at its
# false-positive limit: on the H200 (2026-12-04) every strategy flagged 0 control cases (95% upper
# bound 0.3% per case) and their union found every buggy kernel any one of them found, while
# `default` and `boundary` alone missed what only values, layouts or the op's domain expose.
STUDY = "study"
STUDY_MIX = {
    "default": 20,
    "boundary": 22,
    "benchmark_shape": 2,
    "regular": 8,
    "single_dtype_fp32": 8,
    "single_dtype_fp16": 8,
    "single_dtype_bf16": 8,
    "nan_injected": 8,
    "adversarial": 8,
    "layout": 8,
    "op_domain": 8,
    "combined": 8,
}


def check_mix(strategies: str, cases: int, dtypes: tuple[str, ...]) -> dict[str, int]:
    """Cases per strategy for `rescore check`, `cases` per dtype in all. `study` shares them as
    STUDY_MIX does (largest remainders; a strategy whose share rounds to nothing is left out), the
    single-dtype strategies of `dtypes` sharing one slot since each runs at its own dtype only; a
    comma-separated list shares them equally."""
    if strategies != STUDY:
        names = [s for s in strategies.split(",") if s]
        return {name: max(1, cases // len(names)) for name in names}
    single = [n for n in STUDY_MIX if STRATEGIES[n].dtypes and set(STRATEGIES[n].dtypes) & set(dtypes)]
    weights = {n: w for n, w in STUDY_MIX.items() if not STRATEGIES[n].dtypes}
    if single:
        weights[""] = max(STUDY_MIX[n] for n in single)  # the single-dtype slot
    scale = cases / sum(weights.values())
    share = {n: int(w * scale) for n, w in weights.items()}
    by_remainder = sorted(weights, key=lambda n: (share[n] - weights[n] * scale, list(weights).index(n)))
    for n in by_remainder[: cases - sum(share.values())]:
        share[n] += 1
    mix = {n: k for n, k in share.items() if n and k}
    mix.update({n: share[""] for n in single if share[""]})
    return mix
