"""Findings: what a submission did besides returning an answer, recorded next to the case's outcome.

An outcome says whether the answer was right (the closed set in docs/architecture.md); a finding says how the
submission behaved while producing it: it fell back to PyTorch, patched the harness, opened a socket.
Findings never change an outcome by themselves: the harness undoes what it can (restores patched
functions, recomputes a tampered reference) and judges the answer honestly, then records what it saw.
The `cases` table stores them as a sorted, comma-separated list in the `findings` column.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

FINDINGS: dict[str, str] = {
    "torch_fallback": "claims a kernel, but its own PyTorch calls covered every compute op of the reference",
    "no_kernel": "claims a Triton kernel, but launched none in this call",
    "inherits_reference": "ModelNew derives from the problem's Model (imported or re-defined with its forward)",
    "uses_reference": "holds the problem module or its Model (found in sys.modules or imported)",
    "patched_harness": "changed a torch / numpy / builtins / rescore function or harness state (restored)",
    "sets_numerics": "set global numerics flags (TF32, reduced-precision reductions, float32 matmul precision, "
    "cuDNN modes): kept in force for its own calls, as in the benchmark, and restored for the reference and "
    "the judging",
    "rebinds_problem": "changed the problem module's globals or its Model (restored)",
    "tampers_reference": "wrote into the harness's copies of the inputs (re-made before judging) or into the "
    "reference's output (fixed-shape check, which is faithful to the benchmark and keeps it)",
    "reads_reference": "returned the reference's own output tensor, found in the harness's memory",
    "tensor_subclass": "returned a tensor subclass instead of a plain tensor",
    "aliases_input": "returned a tensor that shares memory with an input",
    "stdout_claim": "printed a verdict-like claim (PASS, JSON with 'correct', ...); the harness never reads it",
    "exits": "ended its process or raised SystemExit / KeyboardInterrupt",
    "memory_hog": "asked for more memory than the worker may use",
    "network": "tried to use the network (blocked)",
    "subprocess": "started a process (blocked, or killed when the call returned)",
    "fs_escape": "tried to write outside its scratch folder (blocked)",
    "signals": "tried to signal a process that is not its own (blocked)",
    "rlimit": "tried to raise its resource limits (blocked)",
    "background_thread": "left a thread running after the call (the worker was restarted)",
    "forged_result": "wrote to the harness's result channel",
    "oom_where_reference_fits": "ran out of memory at sizes where the reference had just run, and again with the "
    "device to itself (the case is `skipped`, not a failure: the harness holds the case's float64 inputs and "
    "copies beside the candidate, so the reference ran with more room)",
    "wrong_when_timed": "the output of its last timed call was wrong (the timing table's timed_output): its "
    "times are not used; with a passing check, it answers differently when timed",
}


REFUSAL_FINDINGS: frozenset[str] = frozenset({"network", "subprocess", "fs_escape", "signals", "rlimit"})
"""What the sandbox's audit hook refuses: a call it stopped is `skipped` with its reason (`refused by the
sandbox: ...`), never the kernel's crash, and counted apart (illusion.parquet `refused_cases`)."""


def merge(*groups: Iterable[str] | str | None) -> str | None:
    """One sorted, comma-separated list from several (sets, lists or comma strings); None if empty."""
    names: set[str] = set()
    for group in groups:
        if not group:
            continue
        if isinstance(group, str):
            group = group.split(",")
        names.update(n.strip() for n in group if n and n.strip())
    return ",".join(sorted(names)) or None


def split(findings: str | None) -> set[str]:
    """The set of names in a `findings` cell."""
    return {n for n in (findings or "").split(",") if n}


_CLAIM = re.compile(
    r"(?im)^\s*(?:\[?\s*(?:pass(?:ed)?|ok|success(?:ful)?|correct)\s*\]?\s*!*\s*$"
    r"|all\s+(?:tests?|checks?|trials?)\s+pass)"
    r"|[\"'](?:correct(?:ness)?|passed|verdict|outcome|compiled)[\"']\s*:"
)


def claims_verdict(text: str) -> bool:
    """True when output text looks like a verdict addressed to a harness that reads stdout."""
    return bool(_CLAIM.search(text))
