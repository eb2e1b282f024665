"""On a GPU: every buggy variant of the corpus, Triton and CUDA C, on its trigger, and its control on
the same input. This is the GPU half of tests/test_corpus.py::test_every_trigger_is_real. The CPU
test skips the GPU-only classes (races, 32-bit offset overflow) and every CUDA C entry.

python scripts/gpu/gpu_corpus.py [--workers 8] [--race-repeats 3] [--classes A,B] [--languages triton,cuda]
                           [--out triggers.json]

A race is not deterministic, so each race trigger runs `--race-repeats` times and counts as real
only when every run fails while its control passes. The 32-bit offset triggers hold 2^31 elements
(8 GiB in float32, twice that for the float64 truth): they run first, one at a time, so that two of
them never share the GPU's memory. `--classes` and `--languages` keep only those variants (and their
controls), for a short GPU lease. Prints one JSON line per (variant, run), then a
summary per bug class and language. Each line is printed as soon as its variant is done, with the
seconds since the start (`t_s`).
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections import defaultdict
from pathlib import Path

from rescore.corpus.catalog import load_corpus
from rescore.engine.triggers import check_triggers

GPU_ONLY = {"int32_offset_overflow", "race_nonatomic"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--race-repeats", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--classes", help="comma-separated bug classes to keep (default: all)")
    parser.add_argument("--languages", help="comma-separated languages to keep: triton, cuda (default: both)")
    parser.add_argument("--out", help="also write the summary as JSON here")
    args = parser.parse_args()
    corpus = load_corpus()
    if args.classes or args.languages:
        classes = set(args.classes.split(",")) if args.classes else None
        languages = set(args.languages.split(",")) if args.languages else None
        kept = [s for s in corpus if s.label == "buggy" and (classes is None or s.bug_class in classes)
                and (languages is None or s.language in languages)]
        controls = {s.control for s in kept}
        corpus = kept + [s for s in corpus if s.name in controls]
    language = {s.name: s.language for s in corpus}
    start = time.perf_counter()
    lock = threading.Lock()

    def printer(label: str):
        def show(r) -> None:  # as each result comes: a run cut short by a time limit keeps its lines
            with lock:
                print(json.dumps({"run": label, "variant": r.variant, "control": r.control, "bug_class": r.bug_class,
                                  "language": language.get(r.variant), "variant_outcome": r.variant_outcome,
                                  "control_outcome": r.control_outcome, "diagnosis": r.diagnosis,
                                  "real": r.real, "reason": r.reason[:160],
                                  "t_s": round(time.perf_counter() - start, 1)}), flush=True)
        return show

    huge = [s for s in corpus if s.bug_class == "int32_offset_overflow"]
    rest = [s for s in corpus if s not in huge]
    huge_controls = {s.control for s in huge}
    runs = [("huge", check_triggers(huge + [s for s in corpus if s.name in huge_controls], device="cuda",
                                    workers=1, timeout=args.timeout, on_result=printer("huge")))]
    runs.append(("all", check_triggers(rest, device="cuda", workers=args.workers, timeout=args.timeout,
                                       on_result=printer("all"))))
    races = [s for s in corpus if s.bug_class == "race_nonatomic"]
    controls = {s.control for s in races}
    for rep in range(1, args.race_repeats):
        subset = races + [s for s in corpus if s.name in controls]
        label = f"race-repeat-{rep}"
        runs.append((label, check_triggers(subset, device="cuda", workers=args.workers, timeout=args.timeout,
                                           on_result=printer(label))))
    per_variant: dict[str, list] = defaultdict(list)
    for _, results in runs:
        for r in results:
            per_variant[r.variant].append(r)
    summary: dict[str, dict] = {}
    for variant, results in per_variant.items():
        key = f"{results[0].bug_class} / {language.get(variant)}"
        cell = summary.setdefault(key, {"variants": 0, "real": 0, "unreal": []})
        cell["variants"] += 1
        if all(r.real for r in results):
            cell["real"] += 1
        else:
            cell["unreal"].append([variant, [(r.variant_outcome, r.control_outcome) for r in results]])
    doc = {
        "bench": "gpu_corpus",
        "wall_s": time.perf_counter() - start,
        "variants": len(per_variant),
        "real": sum(c["real"] for c in summary.values()),
        "gpu_only": {k: v for k, v in sorted(summary.items()) if k.split(" / ")[0] in GPU_ONLY},
        "by_class": dict(sorted(summary.items())),
    }
    print(json.dumps(doc, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
