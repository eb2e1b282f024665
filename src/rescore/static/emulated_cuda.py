"""Run a CUDA-only submission's launches under the interpreter on a machine without CUDA.

Why: a dump may say a kernel runs only with CUDA (gpuemu's `requires_gpu`). Such a kernel defines
its @triton.jit functions only when `torch.cuda.is_available()` and puts its tensors on "cuda", so
the capture, which hides every GPU, would record nothing. What the static study takes from a run is
the launch a GPU would get: argument dtypes, shapes and strides, integer values, constexprs and
16-byte alignment. CPU tensors give the same: the interpreter runs every launch on the host anyway,
and a fresh host allocation is 64-byte aligned (a device one at least 256; Triton looks at 16).

So, inside the capture's forked child of one such submission only, `torch.cuda.is_available()`
answers True and `device_count()` 1, and a tensor placed on "cuda" (a `device=` argument,
`.to("cuda")`, `.cuda()`) is placed on the CPU instead, as a new tensor, as a host-to-device copy
is. Nothing else of CUDA is emulated: streams, events, device properties, `synchronize()` still
raise, and `tensor.is_cuda` is still False. A kernel that needs more of CUDA fails its capture
with that error rather than being captured on a path a GPU would not take.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Any

DEVICE = "emulated_cuda"  # the capture's `device` when this is on (else "cpu")
WHAT = (
    "the static capture runs CUDA-only kernels on an emulated CUDA device: no GPU, the interpreter on "
    "CPU tensors; only torch.cuda.is_available(), device_count() and placing tensors on 'cuda' are emulated, "
    "tensor.is_cuda stays False"
)
_CUDA = re.compile(r"cuda(:\d+)?")


def is_cuda_device(value: Any) -> bool:
    """Whether a `device` argument names a CUDA device ('cuda', 'cuda:1', torch.device('cuda'))."""
    if isinstance(value, str):
        return _CUDA.fullmatch(value) is not None
    return type(value).__name__ == "device" and getattr(value, "type", None) == "cuda"


def _device_argument(value: Any) -> bool:
    """A `device=` value that means a CUDA device: a CUDA name, or an index (`device=0`)."""
    return is_cuda_device(value) or (isinstance(value, int) and not isinstance(value, bool))


def _host_mode() -> Any:
    """A TorchFunctionMode that places on the CPU every tensor placed on a CUDA device."""
    import torch
    from torch.overrides import TorchFunctionMode

    class HostForCuda(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            kwargs = dict(kwargs or {})
            if func is torch.Tensor.cuda:  # x.cuda(device=None, non_blocking=False, memory_format=...)
                fmt = kwargs.get("memory_format", torch.preserve_format)
                return args[0].to("cpu", copy=True, memory_format=fmt)
            moved = "device" in kwargs and _device_argument(kwargs["device"])
            if moved:
                kwargs["device"] = "cpu"
            if func is torch.Tensor.to:
                args = list(args)
                # to(device, dtype, non_blocking, copy): a device comes first after self
                if len(args) > 1 and _device_argument(args[1]):
                    args[1], moved = "cpu", True
                if moved:
                    if len(args) > 4:
                        args[4] = True
                    else:
                        kwargs["copy"] = True
            return func(*args, **kwargs)

    return HostForCuda()


@contextmanager
def emulated_cuda_device():
    """Within: torch reports one CUDA device and places its tensors on the CPU (see the module)."""
    import torch

    saved = torch.cuda.is_available, torch.cuda.device_count
    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: 1
    try:
        with _host_mode():
            yield
    finally:
        torch.cuda.is_available, torch.cuda.device_count = saved
