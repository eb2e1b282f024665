"""Mechanical module moves for rescore: `git mv` each file, then rewrite every reference to the old
dotted names (imports, `python -m` strings, monkeypatch targets) in src, tests, bench, workflow,
notebooks and docs. Usage (from the repository root):

    python move.py MOVES.txt            # do it
    python move.py MOVES.txt --dry-run  # print what would change

MOVES.txt: one `old -> new` per line, paths relative to src/rescore; a trailing `/` moves a package.
`from rescore import a, b` lines are split per module and keep their local names with `as`."""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

PKG = Path("src/rescore")
SCAN = ["src", "tests", "bench", "workflow", "notebooks", "docs", "README.md", "Snakefile", "Makefile", "scripts"]
SUFFIXES = {".py", ".smk", ".md", ".sh", ".rst", ".yaml", ""}


def dotted(rel: str) -> str:
    rel = rel.rstrip("/")
    parts = Path(rel).with_suffix("").parts if rel.endswith(".py") else Path(rel).parts
    parts = [p for p in parts if p not in ("__init__", "__main__")]
    return ".".join(["rescore", *parts])


def read_moves(path: str) -> list[tuple[str, str]]:
    moves = []
    for line in Path(path).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            old, new = (s.strip() for s in line.split("->"))
            moves.append((old, new))
    return moves


def git_mv(old: str, new: str, dry: bool) -> None:
    src, dst = PKG / old, PKG / new
    if dry:
        print(f"git mv {src} {dst}")
        return
    if str(dst).endswith("/__main__.py") and dst.parent.with_suffix(".py") == src:
        tmp = src.with_name(f"_{src.stem}_moving.py")  # worker.py -> worker/__main__.py: a file and a folder
        subprocess.run(["git", "mv", str(src), str(tmp)], check=True)  # of one name cannot coexist
        src = tmp
    dst.parent.mkdir(parents=True, exist_ok=True)
    for pkg in [dst.parent, *dst.parent.parents]:  # every new folder is a package
        if pkg == PKG.parent or not str(pkg).startswith(str(PKG)):
            break
        init = pkg / "__init__.py"
        if not init.exists() and not (old.endswith("/") and pkg == dst):
            init.write_text("")
            subprocess.run(["git", "add", str(init)], check=True)
    subprocess.run(["git", "mv", str(src).rstrip("/"), str(dst).rstrip("/")], check=True)


def rewrite_from_rescore_import(text: str, names: dict[str, str]) -> str:
    """`from rescore import a, b as c` -> one `from <parent> import <base> [as name]` per moved module."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    lines = text.splitlines(keepends=True)
    edits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "rescore" and node.level == 0:
            if not any(f"rescore.{a.name}" in names for a in node.names):
                continue
            indent = re.match(r"\s*", lines[node.lineno - 1]).group(0)
            out = []
            for a in node.names:
                new = names.get(f"rescore.{a.name}", f"rescore.{a.name}")
                parent, base = new.rsplit(".", 1)
                local = a.asname or a.name
                out.append(f"{indent}from {parent} import {base}" + (f" as {local}" if local != base else "") + "\n")
            edits.append((node.lineno - 1, node.end_lineno, out))
    for start, end, out in sorted(edits, reverse=True):
        lines[start:end] = out
    return "".join(lines)


def main() -> None:
    moves = read_moves(sys.argv[1])
    dry = "--dry-run" in sys.argv
    names = {dotted(o): dotted(n) for o, n in moves}
    names = {o: n for o, n in names.items() if o != n}
    pattern = re.compile(r"(?<![\w.])(" + "|".join(re.escape(o) for o in sorted(names, key=len, reverse=True))
                         + r")(?![\w])")
    for old, new in moves:
        git_mv(old, new, dry)
    files = []
    for root in SCAN:
        p = Path(root)
        files += [p] if p.is_file() else [f for f in p.rglob("*") if f.is_file() and f.suffix in SUFFIXES]
    changed = 0
    for f in files:
        if any(part in str(f) for part in ("corpus/ops", "fixtures", "__pycache__", "docs/runs/", "redesign-plan")):
            continue
        try:
            text = f.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        new = pattern.sub(lambda m: names[m.group(1)], text)
        if f.suffix == ".py":
            new = rewrite_from_rescore_import(new, names)
        if new != text:
            changed += 1
            if dry:
                print(f"rewrite {f}")
            else:
                f.write_text(new)
    print(f"{len(moves)} moves, {changed} files rewritten")


if __name__ == "__main__":
    main()
