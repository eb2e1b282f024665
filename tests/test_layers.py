"""The layers' import promises that the import contract (.importlinter) cannot see: what a process
loads when it imports the pipeline's stages or the command line, before any stage or command runs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("torch", "triton", "matplotlib")


@pytest.mark.parametrize("module", ["rescore.stages", "rescore.cli"])
def test_importing_the_entry_points_loads_no_torch_triton_or_matplotlib(module):
    # a fresh interpreter: this test process has torch loaded already
    code = f"import json, sys, {module}; print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
