"""The `rescore` command: check one kernel, replay one case, inspect the corpus and static metrics."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rescore.corpus.catalog import catalog_markdown, load_corpus
from rescore.engine.check import check_pair, human_summary
from rescore.engine.plan import plan_cases
from rescore.engine.progress import run_with_progress, show
from rescore.engine.replay import replay_cli
from rescore.engine.runner import Progress
from rescore.ingest.files import pair_from_files
from rescore.inputs.strategies import STRATEGIES, STUDY, check_mix
from rescore.model.outcomes import FixedVerdict, FuzzVerdict
from rescore.model.run import (
    FUZZ_DTYPES,
    SETTLE_AFTER,
    SETTLE_TIMEOUT_S,
    SUBMISSION_BUDGET_S,
    RunConfig,
    default_budget,
)
from rescore.runtime.device import DeviceUnavailable, require_device, resolve_device
from rescore.static.report import describe_kernel

EXIT_OK, EXIT_FLAGGED, EXIT_USAGE = 0, 1, 2
# `rescore check`'s per-case timeout: a developer's loop wants a hang's verdict within a minute (a
# hang costs one full timeout, then one shortened one: pacing.py). On a GPU a case may build a
# CUDA extension inside it (about 75 s cold), so there it is the pipeline's 120 s.
CHECK_TIMEOUT_S = {"cpu": 30.0, "cuda": 120.0}


def _config(args: argparse.Namespace) -> RunConfig:
    device = resolve_device(args.device)
    dtypes = tuple(d for d in args.dtypes.split(",") if d)
    mix = check_mix(args.strategies, args.cases, dtypes)
    budget = args.budget or default_budget(device)
    return RunConfig(
        device=device,
        master_seed=args.seed,
        strategies=mix,
        dtypes=dtypes,
        fixed_profile=args.profile,
        timeout_s=args.timeout or CHECK_TIMEOUT_S[device],
        budget=budget,
        regressions=True,  # a developer's loop: what failed last time is run first
        submission_budget_s=(SUBMISSION_BUDGET_S[device] if args.submission_budget is None
                             else args.submission_budget) or None,
        settle_after=args.settle_after,
        settle_timeout_s=args.settle_timeout,
        explain=not args.no_explain,
    )


def cmd_check(args: argparse.Namespace) -> int:
    for name in [] if args.strategies == STUDY else args.strategies.split(","):
        if name not in STRATEGIES:
            print(f"rescore check: unknown strategy {name!r}; known: {', '.join(sorted(STRATEGIES))}", file=sys.stderr)
            return EXIT_USAGE
    try:
        sub = pair_from_files(args.problem, args.submission)
    except (FileNotFoundError, OSError) as exc:
        print(f"rescore check: {exc}", file=sys.stderr)
        return EXIT_USAGE
    cfg = _config(args)
    try:
        require_device(cfg.device)  # here, or the worker finding it unusable (a driver gone since)
        progress = Progress(len(plan_cases(sub, cfg)), label=f"{sub.name}: ")
        try:
            doc, _ = check_pair(sub, cfg, progress=progress, robustness_in_headline=args.robustness_counts)
        finally:
            progress.close()
    except DeviceUnavailable as exc:
        print(f"rescore check: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(human_summary(doc, sub, cfg.device))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(doc, indent=2, default=str))
    flagged = doc["fixed"]["verdict"] != FixedVerdict.PASS or doc["fuzz"]["verdict"] == FuzzVerdict.FLAGGED
    return EXIT_FLAGGED if flagged else EXIT_OK


def cmd_replay(args: argparse.Namespace) -> int:
    return replay_cli(args)


def cmd_static(args: argparse.Namespace) -> int:
    print(describe_kernel(args.kernel, args.problem))
    return EXIT_OK


def cmd_corpus(args: argparse.Namespace) -> int:
    print(catalog_markdown(load_corpus()))
    return EXIT_OK


def cmd_progress(args: argparse.Namespace) -> int:
    command = args.command_line[1:] if args.command_line[:1] == ["--"] else args.command_line
    if not command:
        return show(args.directory)
    return run_with_progress(command, args.directory, interval=args.interval)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rescore", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def run_options(p: argparse.ArgumentParser, timeout_help: str = "", timeout: float = 120.0) -> None:
        p.add_argument(
            "--device",
            choices=["auto", "cpu", "cuda"],
            default="auto",
            help="auto: CUDA when present, else the CPU through the Triton interpreter",
        )
        p.add_argument("--dtypes", default=",".join(FUZZ_DTYPES))
        p.add_argument("--timeout", type=float, default=timeout,
                       help="seconds per case before it is a timeout" + timeout_help)
        p.add_argument("--budget", type=int, default=0, help="max elements of the largest input (0: per device)")
        p.add_argument(
            "--profile",
            default="kernelbench-v0.1",
            choices=["kernelbench-v0.1", "kernelbench-head"],
            help="the fixed-shape check's tolerance profile",
        )

    check = sub.add_parser("check", help="fixed-shape check and fuzz oracle on PROBLEM.py SUBMISSION.py")
    check.add_argument("problem")
    check.add_argument("submission")
    check.add_argument("--json", metavar="OUT", help="write the verdicts and failures as JSON")
    check.add_argument("--cases", type=int, default=100, help="fuzz cases per dtype, split over the strategies")
    check.add_argument("--no-explain", action="store_true",
                       help="no experiments to confirm a failure's cause, no second call on a passing case")
    check.add_argument("--seed", type=int, default=0, help="master seed")
    check.add_argument("--robustness-counts", action="store_true",
                       help="count robustness findings (failures only on NaN/Inf, extreme magnitudes or cancelling "
                            "values, or one toolchain's compiler refusing the kernel) toward the fuzz verdict and the "
                            "exit code; without it they are printed apart and the exit code is the headline's")
    check.add_argument("--strategies", default=STUDY,
                       help=f"comma-separated strategies sharing --cases equally, or `{STUDY}` (the default): the "
                            "pipeline's mix, which the strategies study ranks best at its false-positive limit")
    check.add_argument("--submission-budget", type=float, default=None, metavar="SECONDS",
                       help="wall seconds for the cases after the load; the rest are skipped (default per device: "
                            + ", ".join(f"{d} {t:g}" for d, t in SUBMISSION_BUDGET_S.items()) + "; 0: none)")
    check.add_argument("--settle-after", type=int, default=SETTLE_AFTER, metavar="N",
                       help="skip the remaining cases after N cases in a row that hang or kill the worker the "
                            "same way (0: never)")
    check.add_argument("--settle-timeout", type=float, default=SETTLE_TIMEOUT_S, metavar="SECONDS",
                       help="the per-case timeout after a case timed out (a case past it is not judged)")
    run_options(check, " (0: per device, " + ", ".join(f"{d} {t:g}" for d, t in CHECK_TIMEOUT_S.items()) + ")", 0.0)
    check.set_defaults(func=cmd_check)

    replay = sub.add_parser(
        "replay", help="re-run one stored case: FAILURE_ID, or PROBLEM SUBMISSION --strategy --seed"
    )
    replay.add_argument("target", nargs="+", help="FAILURE_ID, or PROBLEM.py SUBMISSION.py")
    replay.add_argument("--strategy", default="default")
    replay.add_argument("--seed", type=int)
    replay.add_argument("--oracle", choices=["fuzz", "fixed"], default="fuzz")
    replay.add_argument("--trigger", help="JSON trigger (sizes, values, layout, dtype, repeat)")
    replay.add_argument("--results", default="results", help="where failures are stored (for FAILURE_ID)")
    run_options(replay)
    replay.set_defaults(func=cmd_replay)

    static = sub.add_parser("static", help="offline PTX metrics (sm_90, sm_80) of the Triton kernels of one file")
    static.add_argument("kernel")
    static.add_argument("--problem", help="the problem file (default: problem.py next to the kernel)")
    static.set_defaults(func=cmd_static)

    corpus = sub.add_parser("corpus", help="print the built-in corpus catalog as Markdown")
    corpus.set_defaults(func=cmd_corpus)

    progress = sub.add_parser(
        "progress",
        help="the progress of a pipeline run: once, or around `-- COMMAND` (what `make all` runs)",
        description="Without a command: print one line on the latest Snakemake run in DIRECTORY (stage, "
        "shards, submissions and cases done of the total, the slowest shard, time left). With `-- COMMAND`: "
        "run it; on a terminal its output goes to results/logs/snakemake.out and that line is redrawn, "
        "anywhere else it runs as it is and nothing is added. The exit code is the command's.",
    )
    progress.add_argument("--directory", default=".", help="the run's working directory (Snakemake's -d)")
    progress.add_argument("--interval", type=float, default=2.0, help="seconds between redraws of the line")
    progress.add_argument("command_line", nargs=argparse.REMAINDER, metavar="-- COMMAND")
    progress.set_defaults(func=cmd_progress)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
