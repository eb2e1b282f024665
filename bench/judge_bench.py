"""What judging one large output costs: `oracle.judge.judge` (the comparison, the policies' ratios
and, for a failure, its diagnosis) on synthetic outputs of one size, on the CPU.

python bench/judge_bench.py [--elements 3110184] [--repeats 3]

Prints, per pattern (a passing output; wrong by a factor of 1.01 everywhere, or on half of the
elements; wrong by noise everywhere), the kind the diagnosis gives and the least milliseconds of
`--repeats` runs of the judging and of the diagnosis alone. The failing cases of the H100 runs'
largest outputs (2-6 million elements) spent most of the `compare` phase here. To compare two
versions of the code, run it with each on PYTHONPATH (`PYTHONPATH=OTHER/src python bench/judge_bench.py`).
"""

from __future__ import annotations

import argparse
import functools
import json
import time

import torch

from rescore.oracle import diagnose, judge


def patterns(n: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """name -> (output in float32, float64 truth), `n` elements in rows of 8."""
    g = torch.Generator().manual_seed(0)
    shape = (n // 8, 8)
    t = torch.randn(shape, dtype=torch.float64, generator=g)
    half = torch.where(torch.rand(shape, generator=g) < 0.5, 1.0, 1.01).double()
    return {
        "pass": (t.float(), t),
        "factor everywhere": ((t * 1.01).float(), t),
        "factor on half": ((t * half).float(), t),
        "noise everywhere": ((t + 0.01 * torch.randn(shape, dtype=torch.float64, generator=g)).float(), t),
    }


def least_ms(fn, repeats: int) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return 1e3 * best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--elements", type=int, default=3_110_184)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    for name, (out, truth) in patterns(args.elements).items():
        judged_ms, verdict = least_ms(functools.partial(judge.judge, out, [truth], [truth.float()], [], [],
                                                        torch.float32, "float32", 64, device="cpu", overrides=None),
                                      args.repeats)
        bad = (out.double() - truth).abs() > 1e-6
        diagnosed_ms, kind = least_ms(functools.partial(diagnose.diagnose, out, truth, bad, True), args.repeats)
        print(json.dumps({"pattern": name, "elements": out.numel(), "outcome": str(verdict["outcome"]),
                          "diagnosis": kind, "judge_ms": round(judged_ms, 1), "diagnose_ms": round(diagnosed_ms, 1)}))


if __name__ == "__main__":
    main()
