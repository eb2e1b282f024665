"""On a GPU: run the race triggers of the Triton corpus (variant and control), several times each.

python bench/gpu_races.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json

from rescore.corpus.catalog import load_corpus
from rescore.engine.sandbox import Worker
from rescore.engine.triggers import run_trigger


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--classes", default="race_nonatomic")
    args = parser.parse_args()
    subs = {s.name: s for s in load_corpus()}
    classes = set(args.classes.split(","))
    variants = [s for s in subs.values() if s.bug_class in classes and s.language == "triton"]
    worker = Worker("cuda", 1 << 22)
    rows = []
    try:
        for v in variants:
            for rep in range(args.repeats):
                trig = dict(v.trigger)
                vr = run_trigger(worker, v, trig, 300)
                cr = run_trigger(worker, subs[v.control], trig, 300)
                rows.append(
                    {
                        "variant": v.name,
                        "control": v.control,
                        "repeat": rep,
                        "variant_outcome": vr.get("outcome"),
                        "variant_diagnosis": vr.get("diagnosis"),
                        "control_outcome": cr.get("outcome"),
                        "reason": (vr.get("reason") or "")[:160],
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
    finally:
        worker.stop()


if __name__ == "__main__":
    main()
