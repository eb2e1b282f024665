"""The fuzz bound of a gpuemu case before and after the rounded-reference change, from a run's rows.

python tools/rounded_reference_bound.py GPUEMU_DATA CASES_PARQUET [--kernel NAME=KERNEL.py ...]
    [--budget 1048576] [--names a,b]

For every `mismatch` fuzz row of the gpuemu entries in CASES_PARQUET (a GPU run's cases table) it
draws the case's inputs again on this machine (the same strategy, seed, dtype and element budget;
the recorded `inputs_hash` must match, or the row is reported unmatched), runs the entry's float64
reference, and compares the error the run recorded at its worst element (`first_mismatch`, `got`
in its reason) with the bound there: atol + rtol |ref| + 4 x the low-precision reference's error,
with the old low-precision reference (the rounded float64 Model run at the test dtype) and the new
one (the Model with every intermediate rounded once at float32, the farthest of three runs:
oracle/reference.py). A
row whose worst element is past the new bound still fails; one within it may pass (no other element
is known). `--kernel NAME=FILE` also runs a numpy `run(inputs)` kernel on every fuzz case of entry
NAME (passing rows too) and judges its output under both bounds: a stand-in for a GPU kernel.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
from collections import defaultdict
from pathlib import Path

import pandas as pd
import torch

from rescore.ingest import gpuemu
from rescore.ingest.common import BrokenSubmission
from rescore.inputs.seeds import sub_seed
from rescore.model.run import default_budget
from rescore.oracle.compare import max_finite_error
from rescore.oracle.judge import judge_one
from rescore.oracle.reference import Reference, reference_at, round_parameters
from rescore.oracle.tolerance import DEFAULT_POLICY, torch_dtype
from rescore.worker import case_inputs
from rescore.worker.loading import load_problem
from rescore.worker.placement import lowp
from rescore.worker.protocol import job_of

GOT = re.compile(r"got (\S+), expected (\S+)")


def inputs_of(module, schema, row: dict, budget: int) -> tuple[list, list, object] | None:
    """The case's (inputs at float64, init inputs, spec) drawn again, or None when no draw of its seed
    (or a retry seed, as worker/case.py draws them) gives the recorded sizes and inputs hash."""
    seeds = [int(row["seed"])] + [sub_seed(int(row["seed"]), f"retry{i}") for i in range(1, 6)]
    for seed in seeds:
        spec = case_inputs.draw(module, schema, budget, row["strategy"], seed, row["dtype"])
        if json.dumps(spec.sizes) != row["sizes"] or spec.values != row["values"]:
            continue
        inputs64, init = case_inputs.make_inputs(module, schema, "cpu", spec)
        if case_inputs.inputs_hash(inputs64) == row["inputs_hash"]:
            return inputs64, init, spec
    return None


def references(module, inputs64: list, init: list, spec) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list]:
    """(truth, old low-precision reference, new one, the inputs at the test dtype) of one case."""
    tdtype = torch_dtype(spec.dtype)
    wseed = sub_seed(spec.seed, "weights")
    low = lowp(inputs64, tdtype, "cpu")
    truths, new = Reference().run(module, inputs64, init, tdtype, wseed, "cpu", "cpu", low)
    old = reference_at(round_parameters(module.Model(*init), tdtype), low, "cpu", tdtype)
    return truths[0], old, new[0], low


def input_names(entry: Path) -> list[str]:
    """The entry's inputs in the order its kernel's `run` gets them (meta.json's input_names)."""
    meta = json.loads((entry / "meta.json").read_text())
    return meta.get("input_names") or [i["name"] for i in meta["op_schema"]["inputs"]]


def load_kernel(path: str):
    spec = importlib.util.spec_from_file_location(f"stand_in_{Path(path).stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", type=Path)
    parser.add_argument("cases", type=Path)
    parser.add_argument("--kernel", action="append", default=[], metavar="NAME=FILE")
    parser.add_argument("--budget", type=int, default=default_budget("cuda"))
    parser.add_argument("--names", default="", help="only these entries (comma-separated)")
    args = parser.parse_args()
    kernels = dict(item.split("=", 1) for item in args.kernel)
    subs = {s.name: s for s in gpuemu.read("gpuemu", {"path": str(args.data)}) if not isinstance(s, BrokenSubmission)}
    wanted = set(filter(None, args.names.split(","))) or set(subs)
    cases = pd.read_parquet(args.cases)
    cases = cases[cases["name"].isin(wanted & set(subs)) & (cases["oracle"] == "fuzz")]
    cases = cases[(cases["outcome"] == "mismatch") | (cases["name"].isin(kernels) & (cases["outcome"] != "skipped"))]
    rows, judged = [], defaultdict(lambda: defaultdict(int))
    for name, group in cases.groupby("name"):
        sub = subs[name]
        module, schema = load_problem(job_of(sub)["problem"])
        kernel = load_kernel(kernels[name]) if name in kernels else None
        for row in group.to_dict("records"):
            drawn = inputs_of(module, schema, row, args.budget)
            if drawn is None:
                rows.append({"name": name, "dtype": row["dtype"], "values": row["values"], "matched": False})
                continue
            truth, old, new, low = references(module, *drawn)
            dtype = row["dtype"]
            if row["outcome"] == "mismatch":
                index = tuple(json.loads(row["first_mismatch"]))
                got = float(GOT.search(row["reason"]).group(1))
                t = float(truth[index])
                bounds = {}
                for which, lp in (("old", old), ("new", new)):
                    atol, rtol, slack = DEFAULT_POLICY.bound(dtype, max_finite_error(lp, truth), sub.problem.tolerance)
                    bounds[which] = atol + rtol * abs(t) + slack
                err = abs(got - t)
                rows.append({"name": name, "label": "buggy" if name.endswith("_buggy") else "correct", "dtype": dtype,
                             "values": row["values"], "strategy": row["strategy"], "sizes": row["sizes"],
                             "matched": True, "err": err, "old_bound": bounds["old"], "new_bound": bounds["new"],
                             "still_fails": err > bounds["new"]})
            if kernel is not None:
                arrays = {n: x.numpy() for n, x in zip(input_names(args.data / name), low)}
                out = torch.from_numpy(kernel.run(arrays))
                for which, lp in (("old", old), ("new", new)):
                    verdict = judge_one(out, truth, lp, torch_dtype(dtype), dtype, row["reduction_len"] or 1,
                                        None, sub.problem.tolerance)
                    judged[(name, dtype, row["values"])][f"{which}_{verdict['outcome']}"] += 1
    table = pd.DataFrame(rows)
    if len(table):
        matched = table[table["matched"]]
        summary = matched.groupby(["label", "name"]).agg(
            mismatch_cases=("err", "size"), still_fail=("still_fails", "sum"),
            worst_within_new=("still_fails", lambda s: int((~s.astype(bool)).sum())),
            min_err_over_new_bound=("err", lambda s: float((s / matched.loc[s.index, "new_bound"]).min())),
        ).reset_index()
        print("## Mismatch rows: the recorded worst error against the old and the new bound\n")
        print(f"{len(table)} rows, {int((~table['matched']).sum())} whose inputs could not be drawn again\n")
        print(summary.to_markdown(index=False))
        within = matched[~matched["still_fails"].astype(bool)]
        if len(within):
            print("\nRows whose worst element is within the new bound:\n")
            print(within[["name", "dtype", "values", "strategy", "sizes", "err", "old_bound", "new_bound"]]
                  .to_markdown(index=False))
    if judged:
        print("\n## Stand-in kernels judged on the same inputs (cases per outcome, old and new bound)\n")
        print(pd.DataFrame([{"name": n, "dtype": d, "values": v, **counts} for (n, d, v), counts in
                            sorted(judged.items())]).fillna(0).to_markdown(index=False))


if __name__ == "__main__":
    main()
