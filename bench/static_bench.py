"""Time the offline static pipeline on the built-in corpus, and check it against a live GPU.

    python bench/static_bench.py corpus [--cache-dir D] [--parallel N] [--out DIR]
    python bench/static_bench.py gpu-check [--cache-dir D]     # on a machine with CUDA
    python bench/static_bench.py api [--out DIR]               # this Triton's API vs rescore's
    python bench/static_bench.py capture [--out-json F]        # launches of every entry, as JSON

`corpus` captures, compiles (sm_90 + sm_80) and measures every Triton entry, then prints the
timings, the per-bug-class summary and the pairs. `gpu-check` compiles the same launches
offline and live (the JIT on the GPU) and compares the PTX hash and ptxas' register/spill counts
with what the driver reports, so "offline" is shown to mean "what the GPU runs".
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

FIXTURES = ROOT / "tests" / "fixtures" / "static"


def corpus_entries() -> list[dict]:
    """Every corpus entry as a static-study entry dict (via the corpus loader)."""
    from rescore.corpus.catalog import load_corpus
    from rescore.static.study import as_entry

    return [as_entry(s) for s in load_corpus()]


def fixture_entries() -> list[dict]:
    base = {"op": "fixture", "language": "triton", "problem_path": str(FIXTURES / "problem.py")}
    return [
        {**base, "id": "fx_correct", "label": "correct", "path": str(FIXTURES / "correct.py")},
        {
            **base,
            "id": "fx_drop_mul",
            "label": "buggy",
            "control": "fx_correct",
            "bug_class": "dropped_op",
            "path": str(FIXTURES / "drop_mul.py"),
        },
        {
            **base,
            "id": "fx_slope",
            "label": "buggy",
            "control": "fx_correct",
            "bug_class": "constant",
            "path": str(FIXTURES / "slope.py"),
        },
        {
            **base,
            "id": "fx_rejected",
            "label": "buggy",
            "control": "fx_correct",
            "bug_class": "interp_only",
            "path": str(FIXTURES / "rejected.py"),
        },
    ]


def run_corpus(args: argparse.Namespace) -> None:
    import pandas as pd

    from rescore.static.study import class_summary, paired_deltas, static_table

    entries = corpus_entries() + fixture_entries()
    tri = [e for e in entries if e.get("language") == "triton"]
    print(f"{len(entries)} entries, {len(tri)} Triton, {len({e['op'] for e in tri})} ops")
    t0 = time.perf_counter()
    df = static_table(entries, cache_dir=args.cache_dir, parallel=args.parallel, timeout=args.timeout)
    wall = time.perf_counter() - t0
    pairs = paired_deltas(df, entries)
    summary = class_summary(pairs)
    n_compiled = int((~df.get("cached", pd.Series(dtype=bool)).fillna(True).astype(bool)).sum())
    print(f"static_table: {wall:.1f} s wall for {len(df)} kernel rows ({n_compiled} compiled now)")
    print(df.groupby(["arch", "outcome"]).size().to_string())
    bad = df[df["outcome"] != "ok"].drop_duplicates("submission_id")
    for _, r in bad.iterrows():
        print(f"  {r['submission_id']}: {r['outcome']}: {str(r['error'])[:300]}")
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.max_rows", 500):
        print(summary.to_string(index=False))
        cols = [
            "variant_id",
            "bug_class",
            "arch",
            "variant_outcome",
            "metrics_identical",
            "ptx_identical",
            "changed_metrics",
        ]
        print(pairs[cols].to_string(index=False))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        df.to_parquet(out / "static.parquet")
        pairs.to_parquet(out / "static_pairs.parquet")
        summary.to_parquet(out / "static_summary.parquet")
        from rescore.static.study import static_figures

        print("figures:", [str(p) for p in static_figures(pairs, None, out)])


def _live_kernels(entry: dict) -> list[dict]:
    """Run a submission on the GPU with the real JIT; return each compiled kernel's PTX and counts."""
    import torch
    from triton.runtime.jit import JITFunction

    from rescore.runtime.modules import load_file

    problem = load_file(entry["problem_path"], "problem")
    sub = load_file(entry["path"], "submission")
    torch.manual_seed(0)
    model = sub.ModelNew(*problem.get_init_inputs()).cuda()
    inputs = [x.float().cuda() if x.is_floating_point() else x.cuda() for x in problem.get_inputs()]
    with torch.no_grad():
        model(*inputs)
    torch.cuda.synchronize()
    found = []
    for name, obj in vars(sub).items():
        fn = obj
        while not isinstance(fn, JITFunction) and hasattr(fn, "fn"):
            fn = fn.fn
        if not isinstance(fn, JITFunction):
            continue
        for caches in fn.device_caches.values():
            for kernel in caches[0].values():
                kernel._init_handles()
                found.append(
                    {
                        "kernel": name,
                        "ptx": kernel.asm["ptx"],
                        "n_regs": kernel.n_regs,
                        "n_spills": kernel.n_spills,
                        "shared": kernel.metadata.shared,
                    }
                )
    return found


def run_gpu_check(args: argparse.Namespace) -> None:
    import triton

    from rescore.static.compile import compile_many
    from rescore.static.launches import capture_many
    from rescore.static.metrics import ptx_hash

    print("triton", triton.__version__)
    entries = [e for e in fixture_entries() + corpus_entries() if e.get("language") == "triton"]
    if args.only:
        entries = [e for e in entries if re.search(args.only, e["id"])]
    caps = capture_many(
        [(e["problem_path"], e["path"]) for e in entries], cache_dir=args.cache_dir, parallel=args.parallel
    )
    if args.captures:  # launches captured elsewhere (a Triton whose interpreter runs these kernels)
        known = json.loads(Path(args.captures).read_text())
        caps = [known.get(e["id"], c) if c["outcome"] != "ok" else c for e, c in zip(entries, caps, strict=True)]
    items = [(e["path"], c["launches"] if c["outcome"] == "ok" else []) for e, c in zip(entries, caps, strict=True)]
    rows = compile_many(items, archs=(90,), cache_dir=args.cache_dir, parallel=args.parallel)
    agree = total = 0
    for e, c, rs in zip(entries, caps, rows, strict=True):
        if c["outcome"] != "ok" or not rs:
            print(f"{e['id']}: capture {c['outcome']} ({str(c.get('error'))[:300]}), {len(rs)} compiled rows")
    for e, c, rs in zip(entries, caps, rows, strict=True):
        try:
            live = _live_kernels(e)
        except Exception as exc:  # noqa: BLE001
            print(
                f"{e['id']}: live run failed: {type(exc).__name__}: {str(exc)[:200]}; offline {c['outcome']} "
                f"{[r['outcome'] for r in rs]}"
            )
            continue
        live_by_hash = {ptx_hash(k["ptx"]): k for k in live}
        for r in rs:
            total += 1
            k = live_by_hash.get(r.get("ptx_hash"))
            if r["outcome"] != "ok" or k is None:
                print(
                    f"{e['id']}/{r['kernel']}: offline {r['outcome']} hash {r.get('ptx_hash')}, live hashes "
                    f"{list(live_by_hash)} {str(r.get('error'))[:200]}"
                )
                continue
            agree += k["n_regs"] == r["registers"] and k["shared"] == r["shared"]
            print(
                f"{e['id']}/{r['kernel']}: ptx identical; regs live {k['n_regs']} offline {r['registers']}; "
                f"spills live {k['n_spills']} offline {r['spill_bytes']} B; smem {k['shared']}/{r['shared']}"
            )
    print(json.dumps({"kernels": total, "agree": agree}))


def run_capture(args: argparse.Namespace) -> None:
    """Write {entry id: capture} for every Triton entry to --out-json (input to gpu-check --captures)."""
    from rescore.static.launches import capture_many

    entries = [e for e in fixture_entries() + corpus_entries() if e.get("language") == "triton"]
    caps = capture_many(
        [(e["problem_path"], e["path"]) for e in entries], cache_dir=args.cache_dir, parallel=args.parallel
    )
    out = {e["id"]: c for e, c in zip(entries, caps, strict=True) if c["outcome"] == "ok"}
    Path(args.out_json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out_json).write_text(json.dumps(out, default=str))
    print(f"{len(out)}/{len(entries)} captured -> {args.out_json}")


def run_api(args: argparse.Namespace) -> None:
    """Dump the Triton sources rescore's assumptions rest on; compare its specialise() to Triton's."""
    import inspect

    import torch
    import triton
    from triton.compiler import compiler
    from triton.runtime import interpreter, jit

    from rescore.static.launches import arg_fact, specialise

    parts = [
        compiler.ASTSource.__init__,
        jit.create_function_from_signature,
        jit.KernelParam,
        interpreter.InterpretedFunction.run,
    ]
    parts += [getattr(jit.JITFunction, n) for n in ("_pack_args", "run", "_do_compile") if hasattr(jit.JITFunction, n)]
    try:
        from triton.backends.nvidia import compiler as nv

        parts += [nv.CUDABackend.make_cubin, nv.get_ptxas]
    except Exception as exc:  # noqa: BLE001
        print("nvidia backend:", exc)
    text = "\n\n".join(f"=== {getattr(p, '__qualname__', p)}\n{inspect.getsource(p)}" for p in parts)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / f"triton-{triton.__version__}-api.txt").write_text(text)
    print("triton", triton.__version__, "ASTSource", inspect.signature(compiler.ASTSource.__init__))
    try:
        from triton._C.libtriton import native_specialize_impl
        from triton.backends.compiler import BaseBackend

        def theirs(a, s, al):
            return tuple(native_specialize_impl(BaseBackend, a, False, s, al))
    except ImportError:
        print(
            "no native_specialize_impl; specialisation names:",
            [n for n in dir(jit) if "special" in n.lower()],
        )
        return
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    args_ = [1, 0, 16, 17, -5, 2**31, 2**31 - 1, 2**63, 1.5, True, None]
    args_ += [
        torch.empty(8, dtype=d, device=dev)
        for d in (torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool, torch.uint8)
    ]
    args_ += [torch.empty(9, device=dev)[1:]]
    bad = 0
    for a in args_:
        for s, al in ((True, True), (False, True), (True, False)):
            m = specialise(arg_fact(a), specialize=s, align=al)
            mine = (m["type"], m["value"] if m["type"] == "constexpr" else m["attr"])
            if mine != theirs(a, s, al):
                bad += 1
                print("DIFF", repr(a)[:30], s, al, mine, theirs(a, s, al))
    print(f"specialise: {len(args_) * 3 - bad}/{len(args_) * 3} agree with Triton's native_specialize_impl")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["corpus", "gpu-check", "api", "capture"])
    ap.add_argument("--captures", default=None, help="gpu-check: JSON from `capture` to use where capture fails")
    ap.add_argument("--only", default=None, help="gpu-check: regex on entry ids")
    ap.add_argument("--out-json", default=".rescore-cache/static_captures.json")
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--parallel", type=int, default=None)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    modes = {"corpus": run_corpus, "gpu-check": run_gpu_check, "api": run_api, "capture": run_capture}
    modes[args.mode](args)


if __name__ == "__main__":
    main()
