"""What this machine offers a run: the device `auto` stands for, whether the timing stage has a GPU,
the torch and triton installed, and the cores this process may use. torch is imported only inside
the functions that ask it, so that a process that never touches a tensor never loads it."""

from __future__ import annotations

import importlib.metadata
import os


def resolve_device(device: str) -> str:
    """`auto` is CUDA when present, otherwise the CPU through the Triton interpreter."""
    if device != "auto":
        return device
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except Exception:  # pragma: no cover
        return "cpu"


NO_DEVICE_EXIT = 78  # a worker's exit code when its device cannot run here (EX_CONFIG): a usage error, no verdict


class DeviceUnavailable(RuntimeError):
    """The device a run asks for cannot run here (`--device cuda` without CUDA): a usage error of the
    whole run, never a kernel's verdict. Its message is the one line to print."""


def device_problem(device: str) -> str | None:
    """Why `device` cannot run kernels on this machine, in one line that says what to do; None when it can."""
    if device != "cuda":
        return None
    try:
        import torch
    except Exception as exc:  # pragma: no cover - torch is a dependency
        return f"device cuda: torch cannot be imported ({exc}); install a CUDA build of torch"
    if torch.version.cuda is None:
        why = f"torch {torch.__version__} was built without CUDA"
    elif not torch.cuda.is_available():
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "unset")
        why = f"torch {torch.__version__} sees no CUDA GPU (CUDA_VISIBLE_DEVICES {visible})"
    else:
        return None
    return (f"device cuda cannot run here: {why}; use --device cpu or auto (config: `device: cpu` or `auto`), "
            "or run on a machine with a CUDA GPU and a CUDA build of torch")


def require_device(device: str) -> None:
    """Raise DeviceUnavailable when `device` cannot run here."""
    problem = device_problem(device)
    if problem:
        raise DeviceUnavailable(problem)


def timing_device(device: str) -> tuple[str, str]:
    """(cuda | cpu, why): `cpu` when the config says so, or when no CUDA GPU is visible to torch."""
    import torch

    if device == "cpu":
        return "cpu", "the config's device is cpu"
    if torch.cuda.is_available():
        return "cuda", torch.cuda.get_device_name(0)
    return "cpu", f"the config's device is {device} and torch {torch.__version__} sees no CUDA GPU"


def installed_versions() -> dict[str, str | None]:
    """torch and triton as installed, read without importing them (for rows no worker produced)."""
    out: dict[str, str | None] = {}
    for name in ("torch", "triton"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def machine_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS has one, else the CPU count)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def gpu_count() -> int:
    """The CUDA GPUs this process sees (`torch.cuda.device_count()`, which honours
    CUDA_VISIBLE_DEVICES), 0 where torch or the driver is missing."""
    try:
        import torch

        return int(torch.cuda.device_count())
    except Exception:  # pragma: no cover - torch or the driver missing
        return 0


def nvidia_smi(query: str, *args: str) -> list[list[str]] | None:
    """`nvidia-smi --query-gpu=QUERY [ARGS]`, one list of fields per GPU (nvidia-smi, unlike torch,
    opens no CUDA context: a Snakemake process asking would hold one for the whole run). None without
    nvidia-smi or a GPU."""
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits", *args],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return [[field.strip() for field in line.split(",")] for line in out.splitlines() if line.strip()]


def gpu_memory_mib(visible: str | None = None) -> int | None:
    """The total memory in MiB of the smallest GPU this process may use (`nvidia_smi`); the GPUs
    CUDA_VISIBLE_DEVICES lists by index where it does. None without nvidia-smi or a GPU."""
    totals = {row[0]: int(row[1]) for row in nvidia_smi("index,memory.total") or []
              if len(row) == 2 and row[0].isdigit() and row[1].isdigit()}
    given = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    wanted = [e.strip() for e in (given or "").split(",") if e.strip()]
    if wanted and all(e.isdigit() for e in wanted):
        totals = {k: v for k, v in totals.items() if k in wanted}
    return min(totals.values()) if totals else None


def gpu_identity(visible: str | None = None) -> str | None:
    """The model, memory (MiB) and driver of the first GPU this process may use (`visible`, else
    CUDA_VISIBLE_DEVICES), from `nvidia_smi`; None where it cannot tell."""
    index = (visible or os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0].strip()
    rows = nvidia_smi("name,memory.total,driver_version", "-i", index)
    return ", ".join(rows[0]) if rows else None
