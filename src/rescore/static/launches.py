"""Record the Triton kernel launches a submission makes at its problem's fixed shape.

Why: the compiler needs what the GPU launcher would see (argument types, the integer
specialisations, constexpr values, launch options), and the only honest way to get them is to run
the submission. Capture runs it on CPU tensors under the Triton interpreter in a worker process
(TRITON_INTERPRET must be set before triton is imported) and returns plain data. A submission that
fails to import or run is a recorded outcome (`capture_error`), never an exception. A submission
its dump marks CUDA-only runs on an emulated CUDA device (rescore.static.emulated_cuda).
"""

from __future__ import annotations

import inspect
import json
import os
import time
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from rescore.model.outcomes import RunStatus
from rescore.model.records import cuda_only
from rescore.runtime.modules import file_digest, load_file
from rescore.static import cache, emulated_cuda
from rescore.static.worker import run_jobs

CAPTURE_VERSION = 1

# torch dtype name -> Triton type string of a pointer to it (what the GPU launcher specialises to)
_TORCH_TO_TRITON = {
    "float32": "fp32",
    "float16": "fp16",
    "bfloat16": "bf16",
    "float64": "fp64",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "u8",
    "uint16": "u16",
    "uint32": "u32",
    "uint64": "u64",
    "bool": "u1",
    "float8_e4m3fn": "fp8e4nv",
    "float8_e5m2": "fp8e5",
    "float8_e4m3fnuz": "fp8e4b8",
    "float8_e5m2fnuz": "fp8e5b16",
}
_NO_SPECIALISE_ANNOTATIONS = ("u1", "fp", "bf")


def arg_fact(value: Any) -> dict:
    """Plain-data description of one launch argument: kind plus what specialisation reads."""
    if hasattr(value, "data_ptr") and hasattr(value, "dtype"):
        dtype = str(value.dtype).removeprefix("torch.")
        return {
            "kind": "tensor",
            "dtype": dtype,
            "aligned16": value.data_ptr() % 16 == 0,
            "shape": list(value.shape),
            "stride": list(value.stride()),
        }
    if isinstance(value, bool):
        return {"kind": "bool", "value": value}
    if isinstance(value, int):
        return {"kind": "int", "value": int(value)}
    if isinstance(value, float):
        return {"kind": "float", "value": value}
    if value is None:
        return {"kind": "none"}
    if isinstance(value, str):
        return {"kind": "str", "value": value}
    if type(value).__name__ == "dtype" and hasattr(value, "name") and "triton" in type(value).__module__:
        return {"kind": "dtype", "value": value.name}
    if hasattr(value, "dtype") and type(value).__name__ in ("int", "float"):  # numpy scalars
        return arg_fact(value.item())
    return {"kind": "other", "repr": repr(value)[:200]}


def _int_type(v: int) -> str:
    if -(2**31) <= v < 2**31:
        return "i32"
    if 2**63 <= v < 2**64:
        return "u64"
    if -(2**63) <= v < 2**63:
        return "i64"
    raise ValueError(f"integer argument {v} does not fit 64 bits")


def specialise(
    fact: dict, *, constexpr: bool = False, annotation: str = "", specialize: bool = True, align: bool = True
) -> dict:
    """What the GPU launcher turns one argument into: {"type", "attr", "value"}.

    type is a Triton signature string ("*fp32", "i32", "fp32", "constexpr", ...); attr is "D" when
    Triton would mark it divisible by 16, "" when it checked and it is not, None when it does not
    look; value is the constexpr value (plain JSON; a tl.dtype as {"__dtype__": name}). Rules of
    Triton 3.x: an int equal to 1 becomes the constexpr 1 and None the constexpr None; ints are
    i32/i64/u64 by range; floats are fp32; bools u1; tensors are pointers, "D" when the address
    is 16-byte aligned; do_not_specialize turns both int specialisations off; a dtype annotation
    fixes the type.
    """
    kind = fact["kind"]
    if constexpr:
        if kind == "dtype":
            return {"type": "constexpr", "attr": None, "value": {"__dtype__": fact["value"]}}
        if kind == "none":
            return {"type": "constexpr", "attr": None, "value": None}
        if kind in ("int", "float", "bool", "str"):
            return {"type": "constexpr", "attr": None, "value": fact["value"]}
        raise ValueError(f"unsupported constexpr argument: {fact}")
    if annotation and annotation.lstrip("*k").startswith(_NO_SPECIALISE_ANNOTATIONS):
        specialize = False
    if kind == "tensor":
        if fact["dtype"] not in _TORCH_TO_TRITON:
            raise ValueError(f"unsupported tensor dtype {fact['dtype']}")
        ty = "*" + _TORCH_TO_TRITON[fact["dtype"]]
        attr = None if not specialize else ("D" if align and fact["aligned16"] else "")
    elif kind == "bool":
        ty, attr = "u1", None
    elif kind == "int":
        v = fact["value"]
        if specialize and v == 1 and not annotation:
            return {"type": "constexpr", "attr": None, "value": 1}
        ty = _int_type(v)
        attr = None if not specialize else ("D" if align and v % 16 == 0 else "")
    elif kind == "float":
        ty, attr = "fp32", None
    elif kind == "none":
        return {"type": "constexpr", "attr": None, "value": None}
    else:
        raise ValueError(f"unsupported kernel argument: {fact}")
    if annotation:
        ty = annotation
    return {"type": ty, "attr": attr, "value": None}


def launch_spec(params: list[dict]) -> tuple[dict, dict, dict]:
    """(signature by name, constexprs by name, attrs by name) from specialised params."""
    signature = {p["name"]: p["type"] for p in params}
    constexprs = {p["name"]: p["value"] for p in params if p["type"] == "constexpr"}
    attrs = {p["name"]: p["attr"] for p in params if p["attr"] == "D"}
    return signature, constexprs, attrs


def _annotation(param: inspect.Parameter) -> str:
    """Triton's normalised annotation string ('constexpr', 'i64', '*fp32', '' for none)."""
    ann = param.annotation
    if ann is inspect.Parameter.empty or ann is None or ann == "":
        return ""
    try:
        from triton.runtime.jit import _normalize_ty

        return _normalize_ty(ann)
    except Exception:
        name = ann if isinstance(ann, str) else getattr(ann, "__name__", str(ann))
        return name.removeprefix("tl.")


def _flag_set(flags: Sequence | None, names: list[str]) -> set[str]:
    """do_not_specialize entries (names or indices) as a set of names."""
    out = set()
    for f in flags or ():
        out.add(names[f] if isinstance(f, int) else f)
    return out


def _scalar_options(kwargs: dict) -> dict:
    return {k: v for k, v in kwargs.items() if isinstance(v, (int, float, bool, str)) or v is None}


class _Recorder:
    """Collects distinct launches from the patched interpreter."""

    def __init__(self) -> None:
        self.launches: dict[str, dict] = {}

    def record(self, interp_fn: Any, args: tuple, kwargs: dict) -> None:
        fn = interp_fn.fn
        sig = inspect.signature(fn)
        names = list(sig.parameters)
        call_kwargs = {k: v for k, v in kwargs.items() if k in names}
        options = _scalar_options({k: v for k, v in kwargs.items() if k not in names and k not in ("grid", "warmup")})
        bound = sig.bind(*args, **call_kwargs)
        bound.apply_defaults()
        opts = getattr(interp_fn, "kwargs", {}) or {}
        dns = _flag_set(opts.get("do_not_specialize"), names)
        dnsa = _flag_set(opts.get("do_not_specialize_on_alignment"), names)
        params = []
        for name, p in sig.parameters.items():
            ann = _annotation(p)
            fact = arg_fact(bound.arguments[name])
            try:
                spec = specialise(
                    fact,
                    constexpr="constexpr" in ann,
                    annotation="" if "constexpr" in ann else ann,
                    specialize=name not in dns,
                    align=name not in dnsa,
                )
            except ValueError as exc:  # rescore cannot describe it; compile reports it as skipped
                spec = {"type": None, "attr": None, "value": None, "unsupported": str(exc)}
            params.append({"name": name, "fact": fact, **spec})
        grid = kwargs.get("grid")
        if callable(grid):
            try:
                grid = grid({**bound.arguments, **options})
            except Exception:
                grid = None
        grid = [int(g) for g in grid] if isinstance(grid, (tuple, list)) else grid
        signature, constexprs, attrs = launch_spec(params)
        launch = {
            "kernel": fn.__name__,
            "qualname": fn.__qualname__,
            "file": str(Path(fn.__code__.co_filename).resolve()),
            "params": params,
            "signature": signature,
            "constexprs": constexprs,
            "attrs": attrs,
            "options": options,
            "grid": grid,
        }
        key = json.dumps(
            [launch["file"], launch["qualname"], signature, constexprs, attrs, options],
            sort_keys=True,
            default=str,
        )
        if key in self.launches:
            self.launches[key]["count"] += 1
        else:
            launch["index"] = len(self.launches)
            launch["count"] = 1
            self.launches[key] = launch


def _error(exc: BaseException, stage: str) -> str:
    return f"{stage}: {type(exc).__name__}: {str(exc).strip()}"[:4000]


def run_capture(job: dict) -> dict:
    """Worker side: run one submission under the interpreter (TRITON_INTERPRET=1 already set).

    job = {"problem": path, "submission": path, "emulate_cuda": bool, "sizes": {name: int}}. Returns
    {"outcome", "error", "launches", "seconds", "device"}; launches recorded before a failure are
    kept. `sizes` re-binds the problem's module-level size ints before its inputs are made. With
    emulate_cuda the submission is imported and run on an emulated CUDA device (device
    "emulated_cuda"), and a failure or an empty capture says so.
    """
    t0 = time.perf_counter()
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("run_capture needs TRITON_INTERPRET=1 set before triton is imported")
    import torch
    from triton.runtime import interpreter

    from rescore.runtime.interpreter import install_fast_launch, install_numpy_compat

    torch.set_num_threads(1)
    install_numpy_compat()
    install_fast_launch()
    recorder = _Recorder()
    original = interpreter.InterpretedFunction.run

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("warmup", False):
            try:
                recorder.record(self, args, kwargs)
            except Exception:
                pass  # binding failed: the launch itself raises the real error
        return original(self, *args, **kwargs)

    interpreter.InterpretedFunction.run = run
    emulate = bool(job.get("emulate_cuda"))
    outcome, error, stage = RunStatus.OK, None, "import problem"
    try:
        problem = load_file(job["problem"], "problem")
        stage = "set sizes"
        for name, value in (job.get("sizes") or {}).items():
            if type(getattr(problem, name, None)) is not int:
                raise LookupError(f"the problem has no module-level size int {name!r} to set")
            setattr(problem, name, int(value))
        with emulated_cuda.emulated_cuda_device() if emulate else nullcontext():
            stage = "import submission"
            submission = load_file(job["submission"], "submission")
            stage = "build ModelNew"
            if not hasattr(submission, "ModelNew"):
                raise AttributeError("submission defines no ModelNew")
            torch.manual_seed(0)
            model = submission.ModelNew(*problem.get_init_inputs())
            stage = "inputs"
            inputs = [
                x.float() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in problem.get_inputs()
            ]
            stage = "run"
            with torch.no_grad():
                model(*inputs)
    except BaseException as exc:  # noqa: BLE001 - any failure of the submission is a recorded outcome
        outcome, error = "capture_error", _error(exc, stage)
    finally:
        interpreter.InterpretedFunction.run = original
    launches = sorted(recorder.launches.values(), key=lambda launch: launch["index"])
    if outcome == RunStatus.OK and not launches:
        outcome, error = "no_launch", "the submission launched no Triton kernel at the fixed shape"
    if emulate and error:
        error = f"{error} ({emulated_cuda.WHAT})"
    return {
        "outcome": outcome,
        "error": error,
        "launches": launches,
        "seconds": time.perf_counter() - t0,
        "device": emulated_cuda.DEVICE if emulate else "cpu",
    }


def emulates_cuda(submission: str | Path) -> bool:
    """Whether the submission's capture runs on the emulated CUDA device: its dump marks it CUDA-only."""
    return cuda_only(Path(submission).read_text(encoding="utf-8", errors="replace"))


def _capture_key(problem: str | Path, submission: str | Path, emulate: bool, sizes: dict | None) -> str:
    return cache.key(
        "capture",
        CAPTURE_VERSION,
        cache.triton_version(),
        file_digest(problem),
        file_digest(submission),
        str(Path(submission).resolve()),
        *([emulated_cuda.DEVICE] if emulate else []),
        *([sorted(sizes.items())] if sizes else []),
    )


def capture_many(
    pairs: Sequence[tuple[str | Path, str | Path]],
    *,
    parallel: int | None = None,
    timeout: float = 300.0,
    cache_dir: str | Path | None = None,
    sizes: Sequence[dict | None] | None = None,
) -> list[dict]:
    """Capture launches of many (problem, submission) pairs in parallel worker processes.

    sizes, one per pair (None or {} for the problem's own), re-binds the problem's size ints.
    Results are in input order, each {"problem", "submission", "outcome", "error", "launches",
    "seconds", "device", "cached"}; outcome is ok | no_launch | capture_error | timeout | crash;
    device is "emulated_cuda" for a submission marked CUDA-only, else "cpu". Results of ok /
    no_launch / capture_error are cached by the content of both files, the device and the sizes.
    """
    store = cache.Cache(cache_dir)
    results: list[dict | None] = [None] * len(pairs)
    todo, keys, emulate = [], {}, {}
    sizes = list(sizes) if sizes is not None else [None] * len(pairs)
    for i, (prob, sub) in enumerate(pairs):
        try:
            emulate[i] = emulates_cuda(sub)
            k = _capture_key(prob, sub, emulate[i], sizes[i])
        except OSError as exc:
            results[i] = {"outcome": "capture_error", "error": _error(exc, "read files"), "launches": []}
            continue
        hit = store.get_json("capture", k)
        if hit is not None:
            results[i] = {"device": emulated_cuda.DEVICE if emulate[i] else "cpu", **hit, "cached": True}
        else:
            keys[i] = k
            todo.append(i)
    jobs = [
        {
            "problem": str(Path(pairs[i][0]).resolve()),
            "submission": str(Path(pairs[i][1]).resolve()),
            "emulate_cuda": emulate[i],
            "sizes": sizes[i] or {},
        }
        for i in todo
    ]
    for i, res in zip(todo, run_jobs("capture", jobs, parallel=parallel, timeout=timeout), strict=True):
        if res.get("outcome") in (RunStatus.OK, "no_launch", "capture_error"):
            store.put_json("capture", keys[i], res)
        results[i] = {"device": emulated_cuda.DEVICE if emulate[i] else "cpu", **res, "cached": False}
    return [
        {"problem": str(prob), "submission": str(sub), **(res or {})}
        for (prob, sub), res in zip(pairs, results, strict=True)
    ]


def capture_launches(
    problem_path: str | Path,
    submission_path: str | Path,
    *,
    timeout: float = 300.0,
    cache_dir: str | Path | None = None,
) -> dict:
    """Capture the launches of one submission (see capture_many)."""
    return capture_many([(problem_path, submission_path)], parallel=1, timeout=timeout, cache_dir=cache_dir)[0]
