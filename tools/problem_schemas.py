"""The schema each problem of a dump is fuzzed with: its sizes, the names the module derives from them,
the relations its reference needs among them and each input's domain with where it came from.

python tools/problem_schemas.py FORMAT PATH [--compare-with SRC] [--json OUT]

FORMAT and PATH are a dump spec's `format` and `path` (gpuemu, cudal1, kernelbench, ...). Each problem
is loaded as the worker loads it, in this process (no sandbox: only the problems' own code runs, as
at ingest). `--compare-with SRC` also loads each with the rescore package under SRC (another
checkout's `src`, in a subprocess) and prints only the problems whose input domains differ, and how.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from rescore.ingest import read_dump
from rescore.worker.loading import load_problem, schema_dict
from rescore.worker.protocol import job_of


def schemas(fmt: str, path: str) -> dict[str, dict]:
    """problem id -> {submissions, schema (as `schema_dict`), error} for every problem of the dump."""
    out: dict[str, dict] = {}
    for sub in read_dump("dump", {"format": fmt, "path": path}):
        pid = sub.problem.problem_id
        if pid in out:
            out[pid]["submissions"].append(sub.name)
            continue
        entry: dict = {"submissions": [sub.name], "schema": None, "error": None}
        try:
            entry["schema"] = schema_dict(load_problem(job_of(sub)["problem"])[1])
        except Exception as exc:  # noqa: BLE001 - a problem that cannot load is reported, not fatal
            entry["error"] = f"{type(exc).__name__}: {exc}"[:200]
        out[pid] = entry
    return out


def old_domains(src: str, fmt: str, path: str) -> dict[str, dict]:
    """problem id -> {input position: domain} as the rescore under `src` infers them (its OpSchema
    `domains`: positions absent are real)."""
    code = (
        "import json, sys\n"
        "from rescore.ingest import read_dump\n"
        "from rescore.worker.loading import load_problem\n"
        "from rescore.worker.protocol import job_of\n"
        "out = {}\n"
        f"for sub in read_dump('dump', {{'format': {fmt!r}, 'path': {path!r}}}):\n"
        "    if sub.problem.problem_id in out: continue\n"
        "    try: out[sub.problem.problem_id] = load_problem(job_of(sub)['problem'])[1].domains\n"
        "    except Exception as exc: out[sub.problem.problem_id] = {'error': str(exc)[:200]}\n"
        "print(json.dumps(out))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("format")
    parser.add_argument("path")
    parser.add_argument("--compare-with", metavar="SRC")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    found = schemas(args.format, args.path)
    if args.json:
        args.json.write_text(json.dumps(found, indent=1))
    before = old_domains(args.compare_with, args.format, args.path) if args.compare_with else None
    changed = 0
    for pid, entry in found.items():
        schema = entry["schema"]
        if schema is None:
            print(f"{pid}: cannot load: {entry['error']}")
            continue
        now = {str(i): d["domain"] for i, d in enumerate(schema["input_domains"]) if d["domain"] is not None}
        if before is not None:
            was = {str(i): before.get(pid, {}).get(str(i), "real") for i in now}
            if was == now:
                continue
            changed += len(entry["submissions"])
            print(f"{pid} ({', '.join(entry['submissions'])}): {was} -> {now}")
            continue
        domains = ", ".join(f"{d['input']}={d['domain']} ({d['from']})" for d in schema["input_domains"])
        extra = "".join(f"; {k}: {schema[k]}" for k in ("derived", "relations") if schema[k])
        print(f"{pid}: {domains}{extra}")
    if before is not None:
        print(f"{changed} of {sum(len(e['submissions']) for e in found.values())} submissions fuzz other input domains")


if __name__ == "__main__":
    main()
