"""Value classes: how the floating inputs of a case are filled. Each is a pure function of a generator."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

# (shape, generator, the case's dtype, wide): `wide` False lets normals be drawn in float32 (`fill`)
Sampler = Callable[[tuple[int, ...], torch.Generator, torch.dtype, bool], torch.Tensor]


# Past this many elements normals are drawn in float32 and widened: a float64 draw on the CPU is
# five times slower (61 s for a 2^31-element trigger), and every input is rounded to float32 or a
# half type anyway. No fuzz case comes near it (the GPU budget is 2^20 elements).
LARGE_DRAW = 1 << 24


def _randn(shape, gen: torch.Generator, wide: bool = True) -> torch.Tensor:
    """Standard normals from `gen` alone: float64 where `wide` (past LARGE_DRAW drawn in float32 and
    widened), else float32, never widened (values that are rounded to float32 or narrower anyway)."""
    if not wide:
        return torch.randn(shape, generator=gen, dtype=torch.float32)
    if math.prod(shape) > LARGE_DRAW:
        return torch.randn(shape, generator=gen, dtype=torch.float32).to(torch.float64)
    return torch.randn(shape, generator=gen, dtype=torch.float64)


def _normal(shape, gen, dtype, wide=True):
    return _randn(shape, gen, wide)


def _scaled(scale: float) -> Sampler:
    return lambda shape, gen, dtype, wide=True: _randn(shape, gen, wide) * scale


def _uniform(shape, gen, dtype, wide=True):
    return torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1


def _negative(shape, gen, dtype, wide=True):
    return -(_randn(shape, gen, wide).abs() + 0.5)


def _negative_large(shape, gen, dtype, wide=True):
    """All below -100: exp of any of them underflows float32 and float16, so a max that starts at 0
    instead of -inf turns a softmax row into 0/0 (a shift-invariant op hides it at small magnitudes)."""
    return -(100.0 * _randn(shape, gen, wide).abs() + 100.0)


def _positive(shape, gen, dtype, wide=True):
    return _randn(shape, gen, wide).abs() + 0.1


def _near_constant(shape, gen, dtype, wide=True):
    return 3.0 + 1e-3 * _randn(shape, gen, wide)


def _offset_mean(shape, gen, dtype, wide=True):
    return _randn(shape, gen, wide) + 100.0


def _integers(shape, gen, dtype, wide=True):
    return torch.randint(-4, 5, shape, generator=gen).to(torch.float64)


def _sprinkle(
    base: torch.Tensor, gen: torch.Generator, specials: list[float], fraction: float = 0.0, count: int | None = None
) -> torch.Tensor:
    """Replace `count` entries, or else a fraction of them (at least one), with special values."""
    flat = base.reshape(-1).clone()
    n = flat.numel()
    if n == 0:
        return base
    count = max(1, int(round(n * fraction))) if count is None else count
    where = torch.randperm(n, generator=gen)[:count]
    picks = torch.randint(0, len(specials), (count,), generator=gen)
    flat[where] = torch.tensor(specials, dtype=flat.dtype)[picks]
    return flat.reshape(base.shape)


def _nan_sprinkled(shape, gen, dtype, wide=True):
    return _sprinkle(_normal(shape, gen, dtype, wide), gen, [float("nan")], 0.01)


def _nan_few(shape, gen, dtype, wide=True):
    """Normal values with one to three NaN (one per 4096 elements, at most three). A NaN reaches
    every output it feeds (a whole row of a softmax, a head of attention), so ~1% NaN leaves nothing
    finite to compare and hides every other bug; a few test that NaN propagates and leave the rest
    of the output to be checked as in `normal`."""
    count = min(3, max(1, math.prod(shape) // 4096))
    return _sprinkle(_normal(shape, gen, dtype, wide), gen, [float("nan")], count=count)


def _special(shape, gen, dtype, wide=True):
    """NaN, ±Inf, ±0, subnormals, huge and tiny magnitudes, and pairs that cancel."""
    info = torch.finfo(dtype)
    huge = float(info.max) ** 0.5  # large, but its square still fits the dtype
    specials = [
        float("nan"),
        float("inf"),
        float("-inf"),
        0.0,
        -0.0,
        float(info.smallest_normal) / 4,
        -float(info.smallest_normal) / 4,
        huge,
        -huge,
        float(info.eps),
        1.0 + float(info.eps),
        -1.0,
    ]
    base = _normal(shape, gen, dtype, wide)
    flat = base.reshape(-1)
    if flat.numel() >= 2:  # values that cancel: x and -x next to each other
        half = flat.numel() // 2
        flat[half : 2 * half] = -flat[:half]
    return _sprinkle(flat.reshape(shape), gen, specials, 0.05)


def _small_integers(shape, gen, dtype, wide=True):
    return torch.randint(-2, 3, shape, generator=gen).to(torch.float64)


def _sparse(shape, gen, dtype, wide=True):
    """Mostly zeros with a few ones: the simplest values a shrunk counterexample can have."""
    out = torch.zeros(shape, dtype=torch.float64)
    flat = out.reshape(-1)
    if flat.numel():
        count = max(1, flat.numel() // 16)
        flat[torch.randperm(flat.numel(), generator=gen)[:count]] = 1.0
    return flat.reshape(shape)


VALUE_CLASSES: dict[str, Sampler] = {
    "normal": _normal,
    "uniform": _uniform,
    "large": _scaled(100.0),
    "huge": _scaled(1e4),
    "small": _scaled(1e-3),
    "tiny": _scaled(1e-6),
    "negative": _negative,
    "negative_large": _negative_large,
    "positive": _positive,
    "near_constant": _near_constant,
    "offset_mean": _offset_mean,
    "integers": _integers,
    "small_integers": _small_integers,
    "sparse": _sparse,
    "nan_sprinkled": _nan_sprinkled,
    "nan_few": _nan_few,
    "special": _special,
}

NONFINITE_CLASSES = frozenset({"nan_sprinkled", "nan_few", "special"})


def fill(
    shape: tuple[int, ...], value_class: str, gen: torch.Generator, dtype: torch.dtype, domain: str,
    recorded: bool = True,
) -> torch.Tensor:
    """Values of one input in the input's domain, ready to be rounded to `dtype`.

    `recorded`: values a case row pins (its `inputs_hash`, its replay command), drawn in float64 as
    they always were, so that a seed gives the values it gave. Others (a decoy's, which no row records)
    take their normals in float32 where `dtype` is no wider, and keep them there: the same distribution
    once rounded to `dtype`, five times faster to draw on a CPU (15 ms for 2^20 elements in float64),
    and no widening to round back."""
    try:
        sampler = VALUE_CLASSES[value_class]
    except KeyError:
        raise ValueError(f"unknown value class {value_class!r}; known: {sorted(VALUE_CLASSES)}") from None
    values = sampler(tuple(shape), gen, dtype, recorded or dtype == torch.float64)
    if domain == "positive":
        values = values.abs()
    elif domain == "unit":
        values = torch.where(torch.isfinite(values), values.abs().remainder(1.0), values)
    return values
