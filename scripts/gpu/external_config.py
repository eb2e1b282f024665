"""Writes the pipeline config for the README's two external dumps, the gpuemu corpus and CUDA-L1's
H100 kernels (levels 1 and 2): the repository's config/config.yaml with `dumps:` and `papers:`
replaced, each dump by the absolute path given, the gpuemu labels and controls of docs/dumps.md
(`softmax_llm_buggy`'s control is `softmax`), and the sanitizer stage's budget; validated against
config/config.schema.yaml where jsonschema is importable (Snakemake validates it again at its start).

    python scripts/gpu/external_config.py GPUEMU_DATA CUDAL1_JSON --out CONFIG [--sanitizer-budget S]

GPUEMU_DATA is the corpus's `data/` folder (one folder per entry, `_refkit.py` beside them),
CUDAL1_JSON CUDA-L1's `optimized_cuda_code/h100_xsm.json`. Exit code 2 when either is missing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def external_config(gpuemu: Path, cudal1: Path, sanitizer_budget_s: float | None = None) -> dict:
    """config/config.yaml with the two external dumps as its dumps and gpuemu as the papers' dump."""
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["dumps"] = {
        "gpuemu": {"format": "gpuemu", "path": str(gpuemu.resolve()),
                   "labels": {"_buggy$": "buggy", ".*": "correct"},
                   "controls": {"softmax_llm_buggy": "softmax", "^(.+)_buggy$": "\\1"}},
        "cudal1": {"format": "cudal1", "path": str(cudal1.resolve()), "levels": [1, 2]},
    }
    config["papers"] = {"dump": "gpuemu"}
    if sanitizer_budget_s is not None:
        config.setdefault("sanitizer", {})["budget_s"] = sanitizer_budget_s
    return config


def validate(config: dict) -> bool:
    """Raise when `config` breaks config/config.schema.yaml; False when jsonschema is not installed."""
    try:
        import jsonschema
    except ImportError:
        return False
    schema = yaml.safe_load((REPO / "config" / "config.schema.yaml").read_text())
    jsonschema.validate(config, schema)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("gpuemu", type=Path, help="the gpuemu corpus's data/ folder")
    parser.add_argument("cudal1", type=Path, help="CUDA-L1's h100_xsm.json")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--sanitizer-budget", type=float, default=None,
                        help="sanitizer.budget_s: wall seconds for the sanitizer stage (default: the config's)")
    args = parser.parse_args(argv)
    missing = [str(p) for p, ok in ((args.gpuemu, args.gpuemu.is_dir() and any(args.gpuemu.glob("*/meta.json"))),
                                    (args.cudal1, args.cudal1.is_file())) if not ok]
    if missing:
        print(f"external_config.py: not found: {', '.join(missing)} (GPUEMU_DATA: the corpus's data/ folder, one "
              "folder with a meta.json per entry; CUDAL1_JSON: CUDA-L1's h100_xsm.json). Copy them into an "
              "ignored folder of the checkout (scripts/gpu/README.md) and give their paths.", file=sys.stderr)
        return 2
    config = external_config(args.gpuemu, args.cudal1, args.sanitizer_budget)
    checked = validate(config)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("# Written by scripts/gpu/external_config.py from config/config.yaml\n"
                        + yaml.safe_dump(config, sort_keys=False))
    print(f"{args.out}: dumps gpuemu ({config['dumps']['gpuemu']['path']}), cudal1 "
          f"({config['dumps']['cudal1']['path']}); {'valid' if checked else 'not validated here (no jsonschema)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
