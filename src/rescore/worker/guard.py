"""The harness's defences around every call into candidate code: snapshots taken before the
candidate loads (`integrity.py`), checked and restored after each call; the audit hook's findings
(`confine.py`); threads and child processes left behind; a watch on the problem's own Model.forward.
What a call did is kept as findings, with a short note of the first sight of each for the row's reason.

The global numerics flags (TF32, reduced-precision reductions, float32 matmul precision, cuDNN's
modes) are the one exception to "restored after each call": those a submission sets, at import, at
construction or in a call, are the kernel as it was published and benchmarked, so they are put back
in force before each of its own calls (`Guard.published`), and restored to the harness's for the
reference, the judging and the next submission. The finding `sets_numerics` names them.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Callable, Iterator
from typing import Any

from rescore.model.findings import merge
from rescore.worker import confine
from rescore.worker.exceptions import mark_from_candidate
from rescore.worker.experiments import NUMERICS_FLAGS
from rescore.worker.integrity import UNREADABLE, Harness, problem_snapshot, torch_state
from rescore.worker.job import Loaded
from rescore.worker.phases import NO_PHASES, Phases
from rescore.worker.turns import Turns, watch_dynamo
from rescore.worker.usage import Launches, OpRecorder, holds_reference


def _tag_modules_as_dynamo_does() -> None:
    """torch.compile's first compile in a process patches `torch.nn.Module.__init__` and `__setstate__`
    (Dynamo's generation tagging, once per process; torch's own machinery, not the candidate's). Done
    here, before the harness's snapshot, it is part of the harness: a candidate's first compile no
    longer reads as `patched_harness`, and the patch is not undone after each of its calls. A module
    built before a compile is tagged with an older generation than the compile's, which Dynamo treats
    as a module it never saw being built: the same as no tag."""
    try:
        from torch._dynamo import mutation_guard  # the worker has it: torch.use_deterministic_algorithms imports it
    except ImportError:  # a torch without Dynamo: no compile to patch anything
        return
    install = getattr(mutation_guard, "install_generation_tagging_init", None)  # torch 2.0 to 2.13 at least
    if install is not None:
        install()


class Guard:
    """Runs candidate code (`call`) and records what it did: findings of the current request, and
    those of the submission's load, which every row of the submission carries."""

    def __init__(self, loaded: Loaded, phases: Phases = NO_PHASES):
        self.loaded = loaded
        self.phases = phases
        self.harness: Harness | None = None
        self.audit: confine.Audit | None = None
        self.threads: set[threading.Thread] = set()
        self.load_findings: set[str] = set()
        self.load_details: list[str] = []
        self.findings: set[str] = set()
        self.details: list[str] = []
        self.restart = False
        # The numerics flags the submission set (integrity.torch_state names -> its values), in force
        # for its own calls; `as_published` False runs its calls with the harness's flags instead.
        self.published: dict[str, Any] = {}
        self.as_published = True
        self.turns = Turns()  # whose turn it is, told to the parent: a candidate's call is limited in time
        self.dynamo_watched = False  # torch.compile's compiles noted as the compiler's turn (`watch_dynamo`)

    def arm(self, audit: confine.Audit | None = None) -> None:
        """Take the snapshots the candidate will be checked against; from now on the audit hook blocks.
        Called once in a worker, after the harness's own imports and before any candidate loads."""
        Launches.install()
        _tag_modules_as_dynamo_does()
        gc.collect()
        gc.freeze()  # the harness's own objects are never garbage: collections then skip them
        self.harness = Harness()
        self.threads = set(threading.enumerate())
        self.audit = audit
        if audit is not None:
            audit.armed = True

    def call(self, fn: Callable[..., Any], *args: Any, record: OpRecorder | None = None) -> Any:
        """Run candidate code, then undo and record what it did to the harness and the problem."""
        self.turns.candidate()
        with self.phases("call"):
            problem = self.loaded.problem
            snap = problem_snapshot(problem) if problem is not None else None
            model, forward = self._watch_reference()
            if self.published and self.as_published and self.harness is not None:
                self.harness.put(self.published)
            try:
                if record is not None:
                    with record:
                        return fn(*args)
                return fn(*args)
            except BaseException as exc:
                mark_from_candidate(exc)  # the case's verdict, not a fault of the harness (`from_harness`)
                raise
            finally:
                if model is not None and model.__dict__.get("forward") is not forward:
                    if getattr(model.__dict__.get("forward"), "_rescore_watch", False):
                        model.forward = forward
                self.police(snap)

    def _watch_reference(self):
        """Wrap the problem's Model.forward for the length of a candidate call, so that a candidate
        that runs the reference (imported, found in sys.modules, inherited) is noticed."""
        model = getattr(self.loaded.problem, "Model", None)
        forward = model.__dict__.get("forward") if isinstance(model, type) else None
        if forward is None:
            return None, None
        guard = self

        def watched(*args, **kwargs):
            guard.found("uses_reference", "the problem's Model.forward ran inside the candidate's call")
            return forward(*args, **kwargs)

        watched._rescore_watch = True
        model.forward = watched
        return model, forward

    def police(self, snap, after_call: bool = True) -> None:
        """Restore and record what the last call changed (`snap`: the problem's snapshot, or None).
        `after_call` False: no call into candidate code just ended (the request loop's check before
        it answers), so the flags as found are not the submission's and `published` stays."""
        with self.phases("police"):
            if self.harness is not None:
                now = torch_state()
                changed = self.harness.restore(now)
                flags = [c for c in changed if c in NUMERICS_FLAGS]
                if self.as_published and after_call:  # the flags as the call left them are the submission's
                    self.published = {name: now[name] for name in flags if now[name] != UNREADABLE}
                if flags:
                    self.found("sets_numerics", "sets " + ", ".join(f"{n}={now[n]}" for n in flags)
                               + " (in force for its own calls, as in the benchmark)")
                patched = [c for c in changed if c not in NUMERICS_FLAGS]
                if patched:
                    self.found("patched_harness", "patched " + ", ".join(patched[:4]))
            if snap is not None:
                changed = snap.restore()
                if changed:
                    self.found("rebinds_problem", "re-bound " + ", ".join(changed[:4]))
            if self.audit is not None:
                seen, details = self.audit.drain()
                self.findings |= seen
                self.details += details
                if confine.sweep_children():
                    self.found("subprocess", "child processes were left running (killed)")
                alive = [t for t in threading.enumerate() if t not in self.threads and t.is_alive()]
                if alive:
                    self.restart = True
                    self.found("background_thread", f"{len(alive)} thread(s) left running (worker restarted)")
            candidate, problem = self.loaded.candidate, self.loaded.problem
            if candidate is not None and problem is not None:
                self.findings |= holds_reference(candidate, problem)
            if not self.dynamo_watched:
                self.dynamo_watched = watch_dynamo(self.turns)

    @contextlib.contextmanager
    def harness_numerics(self) -> Iterator[None]:
        """The submission's calls in the block run with the harness's numerics flags instead of those
        it set, and what they set is not kept (the precision experiment)."""
        saved, self.as_published = self.as_published, False
        try:
            yield
        finally:
            self.as_published = saved

    def found(self, finding: str, detail: str) -> None:
        """Record a finding, with what was seen the first time in this call (for the row's reason)."""
        if finding not in self.findings and len(self.details) < 8:
            self.details.append(detail[:200])
        self.findings.add(finding)

    def begin(self) -> None:
        """A new request: no findings of its own yet."""
        self.findings, self.details = set(), []

    def forget_load_findings(self) -> None:
        """A new submission: no findings of its load yet, and none of its numerics flags."""
        self.load_findings, self.load_details = set(), []
        self.published = {}

    def keep_load_findings(self) -> None:
        """What the request so far found (the submission's load) is carried by every later row."""
        self.load_findings, self.load_details = set(self.findings), list(self.details)

    def with_findings(self, row: dict) -> dict:
        """The row with the findings of its submission's load and of this call."""
        found = merge(self.load_findings, self.findings)
        if found:
            row["findings"] = found
            details = self.load_details + self.details
            if details:
                note = "; ".join(dict.fromkeys(details))[:400]
                row["reason"] = f"{row['reason']} [{note}]" if row.get("reason") else f"[{note}]"
        return row

    def allow(self, path: str) -> None:
        """Let the candidate write under `path` (a prebuilt extension's folder)."""
        if self.audit is not None:
            self.audit.allow(path)
