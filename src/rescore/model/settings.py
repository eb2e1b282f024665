"""The science a run uses on its device: config.yaml's keys, with its `light` block applied on the
devices that block lists.

The CPU runs every Triton kernel through the interpreter, which executes each program instance in
Python, one after another: a fuzz case costs 25 ms there on average against a few on a GPU, so the
CPU default (`light`, README "What the CPU default runs") runs the strategy study's own design and
not the GPU's larger one. The block is merged the way Snakemake merges a second `--configfile`
(dicts key by key, anything else replaced), so `--configfile config/config.full.yaml`, which sets
`light: {devices: []}`, gives every device the full setting.
"""

from __future__ import annotations

import copy

LIGHT_KEYS = ("fuzz", "study", "static")  # the sections a `light` block may replace


def merge(base: dict, over: dict) -> dict:
    """`over` merged into a copy of `base`: dicts key by key, anything else (lists included) replaced."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def is_light(config: dict, device: str) -> bool:
    """Whether `config`'s `light` block applies on `device` (a resolved device: cpu or cuda)."""
    return device in ((config.get("light") or {}).get("devices") or [])


def effective_config(config: dict, device: str) -> dict:
    """`config` as it runs on `device`: its `light` sections merged over the top-level ones where the
    block lists the device, else `config` itself."""
    if not is_light(config, device):
        return config
    light = config["light"]
    return merge(config, {key: light[key] for key in LIGHT_KEYS if key in light})


def setting_name(config: dict, device: str) -> str:
    """`light` or `full`: which setting `config` gives on `device`, for logs and progress lines."""
    return "light" if is_light(config, device) else "full"
