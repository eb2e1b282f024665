"""Entry point of a worker process: `python -m rescore.worker --fd-in R --fd-out W --device D`.

The results channel is a pipe of the harness's own (never the candidate's stdout). Before any
candidate code can run, the worker confines itself (`confine.py`): rlimits, a watch on its parent,
and an audit hook that is armed once the harness's own imports are done.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from multiprocessing.connection import Connection


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fd-in", type=int, required=True)
    parser.add_argument("--fd-out", type=int, required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--budget", type=int, default=1 << 15)
    parser.add_argument("--no-explain", dest="explain", action="store_false",
                        help="no experiments to confirm a failure's cause, no second call (worker/explain.py)")
    args = parser.parse_args()
    began = time.perf_counter()
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    sys.dont_write_bytecode = True
    from rescore.runtime.device import NO_DEVICE_EXIT, device_problem

    problem = device_problem(args.device)
    marks = {"torch and the device": time.perf_counter()}
    if problem:  # a usage error of the run, not a kernel's verdict: the parent raises DeviceUnavailable
        print(problem, file=sys.stderr, flush=True)
        os._exit(NO_DEVICE_EXIT)
    from rescore.worker import confine

    parent = os.getppid()
    limits = confine.apply_limits(args.device)
    confine.become_subreaper()
    confine.watch_parent(parent)
    writable = [p for p in os.environ.get("RESCORE_WRITABLE", "").split(os.pathsep) if p] or [os.getcwd()]
    audit = confine.Audit(writable)
    audit.install()
    print(f"rescore worker {os.getpid()}: cwd {os.getcwd()}, limits {limits}", file=sys.stderr, flush=True)
    # Import only now: TRITON_INTERPRET must be set before triton is imported.
    from rescore.worker.loop import main_loop

    marks["the harness's imports"] = time.perf_counter()

    class Duplex:
        def __init__(self, r: Connection, w: Connection):
            self.r, self.w = r, w

        def recv(self):
            return self.r.recv()

        def poll(self, timeout: float) -> bool:
            return self.r.poll(timeout)

        def send(self, obj) -> None:
            self.w.send(obj)

    main_loop(
        Duplex(Connection(args.fd_in, writable=False), Connection(args.fd_out, readable=False)),
        args.device,
        args.budget,
        audit,
        explain=args.explain,
        started=(began, marks),
    )
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
