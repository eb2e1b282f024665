"""Cold vs warm build time of one dump's CUDA (load_inline) submissions (measured, not asserted).

  python bench/cuda_build_bench.py --dump NAME [--config config/config.yaml] [--jobs 16] [--cache DIR]

Builds every distinct CUDA source of the dump into a fresh cache on every core (cold), then again
(warm: nothing should compile), and prints a JSON report: wall time of each phase, built / failed /
no_build counts, median and max seconds per build. Run it on the GPU machine: it needs nvcc and
torch with CUDA, and builds for the GPU it sees (TORCH_CUDA_ARCH_LIST overrides).
"""

from __future__ import annotations

import sys

from rescore.engine.cuda_build import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
