"""gpuemu corpora: one folder per entry (`data/<name>/` with kernel.py, meta.json, ref_fp64.py),
translated into KernelBench form so they take the same path through rescore as every other dump.

The generated problem's sizes are the entry's op-schema dims (at their first candidate) and its
Model runs the entry's float64 reference script in-process, in the corpus's own layout: the script
and the helper modules it imports from the corpus (`data/_refkit.py`, found through its imports) are
embedded and written into a temporary folder, so a script that finds them through `__file__` works.
A buggy entry's `reference` may name its control's script (`"softmax/ref_fp64.py"`, relative to
data/). Entries that share a reference script compute one function: their op is the entry folder
that holds the script. The explicit op schema becomes the problem's schema (each dim's range spans
its candidates, which are kept under `candidates`); each input is real-valued unless the op schema
names its `domain`. The generated ModelNew hands numpy arrays to the
kernel's `run(inputs)`; an entry with `requires_gpu: true` is marked CUDA-only (`skipped` without a
GPU). The entry's absolute tolerances become the fuzz atol of each dtype. The label is read from an
explicit `label` key in meta.json, else from the dump spec's `labels` (see dumps.annotations); names
and notes are never parsed for it.

Spec: `{format: gpuemu, path: DIR, entries: [names]}`; DIR is the corpus root or its `data/` folder.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

from rescore.ingest.common import ProblemIds, broken, materialise, normalize_dtypes, normalize_verdict, slug
from rescore.ingest.templates import GPUEMU_PROBLEM, GPUEMU_SUBMISSION, identifier, literal, render
from rescore.model.language import detect_language
from rescore.model.records import ALL_LABELS, CUDA_ONLY_MARKER, Problem, Submission
from rescore.model.schema import DOMAINS


class EntryError(ValueError):
    """A gpuemu entry that does not follow the format: the message names the file and the fault."""


def read(name: str, spec: dict) -> list[Submission]:
    """Every entry of the corpus as a Submission; malformed entries become error rows."""
    root = Path(spec["path"])
    data = root / "data" if (root / "data").is_dir() else root
    if not data.is_dir():
        return [broken(name, f"{name}/*", f"gpuemu/{name}", str(data), "corpus folder does not exist")]
    wanted = set(spec.get("entries") or [])
    ids = ProblemIds()
    seen: dict[str, Path] = {}
    subs: list[Submission] = []
    for folder in sorted(p for p in data.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))):
        if wanted and folder.name not in wanted:
            continue
        try:
            sub = read_entry(name, folder, data, root, ids)
        except EntryError as exc:
            subs.append(broken(name, folder.name, f"gpuemu/{slug(folder.name)}", str(folder), str(exc)))
            continue
        if sub.name in seen:
            subs.append(
                broken(
                    name,
                    sub.name,
                    sub.problem.problem_id,
                    str(folder),
                    f"duplicate entry name {sub.name!r} (also {seen[sub.name]})",
                    source=sub.source,
                )
            )
            continue
        seen[sub.name] = folder
        subs.append(sub)
    return subs


def read_entry(dump: str, folder: Path, data: Path, root: Path, ids: ProblemIds) -> Submission:
    """One entry folder as a Submission of a generated problem; raises EntryError when malformed."""
    meta_file = folder / "meta.json"
    try:
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise EntryError(f"{meta_file}: missing") from exc
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise EntryError(f"{meta_file}: unreadable JSON ({exc})") from exc
    if not isinstance(meta, dict):
        raise EntryError(f"{meta_file}: expected a JSON object")
    schema = meta.get("op_schema")
    if not isinstance(schema, dict):
        raise EntryError(f"{meta_file}: no op_schema object")
    dims, inputs = _parse_schema(schema, meta, meta_file)
    kernel_file = _resolve(meta.get("kernel") or "kernel.py", folder, data, root, meta_file, "kernel")
    ref_file = _resolve(meta.get("reference") or "ref_fp64.py", folder, data, root, meta_file, "reference")
    kernel_source = _text(kernel_file)
    ref_path, ref_files, ref_modules = reference_files(ref_file, data)
    title = str(meta.get("name") or folder.name)
    op = _op_of(ref_path, data, str(schema.get("name") or title))
    problem_source = problem_source_of(op, dims, inputs, ref_path, ref_files, ref_modules)
    problem = Problem(
        problem_id=ids(f"gpuemu/{slug(op)}", problem_source),
        source=problem_source,
        path=materialise(problem_source, "gpuemu_problem"),
        op=op,
        schema=schema_of(dims, schema, inputs_domains(schema, inputs, meta_file)),
        tolerance=tolerance_of(meta.get("tolerances"), meta_file),
    )
    requires_gpu = meta.get("requires_gpu", False)
    if not isinstance(requires_gpu, bool):
        raise EntryError(f"{meta_file}: requires_gpu must be true or false, not {requires_gpu!r}")
    submission_source = submission_source_of(title, inputs, kernel_source, requires_gpu)
    label = str(meta.get("label") or "unknown").strip().lower()
    if label not in ALL_LABELS:
        raise EntryError(f"{meta_file}: label {meta.get('label')!r} is not one of {', '.join(ALL_LABELS)}")
    control = meta.get("control")
    if control is not None and not (isinstance(control, str) and control):
        raise EntryError(f"{meta_file}: control must name the entry this one was seeded from, not {control!r}")
    return Submission(
        name=title,
        problem=problem,
        source=submission_source,
        path=materialise(submission_source, "gpuemu_kernel"),
        dump=dump,
        language=_language(kernel_source),
        label=label,
        bug_class=meta.get("bug_class"),
        control=control,
        description=str(meta.get("notes") or ""),
        dtypes=normalize_dtypes(meta.get("dtypes")),
        provenance=f"gpuemu {meta.get('source') or ''}: {kernel_file}".strip(),
        claimed_verdict=normalize_verdict(meta.get("benchmark_verdict")),
        extra={
            "kernel_path": str(kernel_file),
            "reference_path": str(ref_file),
            "reference_modules": ref_modules,
            "tolerances": meta.get("tolerances"),
            "requires_gpu": requires_gpu,
            **({"label_from": f"{meta_file} label"} if "label" in meta else {}),
        },
    )


def _parse_schema(schema: dict, meta: dict, where: Path) -> tuple[dict[str, tuple[str, list[int]]], list]:
    """(dims: name -> (identifier, candidates), inputs: [(name, identifier, shape terms)])."""
    dims: dict[str, tuple[str, list[int]]] = {}
    for d in schema.get("dims") or []:
        if not isinstance(d, dict) or "name" not in d:
            raise EntryError(f"{where}: op_schema dim {d!r} has no name")
        cands = d.get("candidates")
        if not (isinstance(cands, list) and cands and all(isinstance(c, int) and c > 0 for c in cands)):
            raise EntryError(f"{where}: op_schema dim {d['name']!r} needs a list of positive int candidates")
        dims[str(d["name"])] = (identifier(d["name"], "dim"), list(cands))
    declared = schema.get("inputs")
    if not isinstance(declared, list) or not declared:
        raise EntryError(f"{where}: op_schema has no inputs")
    by_name = {}
    for entry in declared:
        if not isinstance(entry, dict) or "name" not in entry:
            raise EntryError(f"{where}: op_schema input {entry!r} has no name")
        terms = entry.get("dims", entry.get("shape", []))
        for t in terms:
            if not isinstance(t, int) and str(t) not in dims:
                raise EntryError(f"{where}: op_schema input {entry['name']!r} uses undeclared dim {t!r}")
        by_name[str(entry["name"])] = [t if isinstance(t, int) else str(t) for t in terms]
    order = [str(n) for n in meta.get("input_names") or by_name]
    if sorted(order) != sorted(by_name):
        raise EntryError(f"{where}: input_names {order} do not match op_schema inputs {list(by_name)}")
    taken = {ident for ident, _ in dims.values()}
    inputs = []
    for n in order:
        ident = identifier(n, "in")
        while ident in taken:
            ident += "_"
        taken.add(ident)
        inputs.append((n, ident, by_name[n]))
    return dims, inputs


def _resolve(given: str, folder: Path, data: Path, root: Path, where: Path, what: str) -> Path:
    for base in (folder, data, root, Path.cwd()):
        p = base / given
        if p.is_file():
            return p
    raise EntryError(f"{where}: {what} file {given!r} not found (looked in {folder}, {data}, {root})")


def reference_files(ref_file: Path, data: Path) -> tuple[str, dict[str, str], list[str]]:
    """The reference script and every module of the corpus it imports, directly or through another
    such module: (the script's path relative to data/, {path relative to data/: text}, the names
    those modules are imported under).

    A module is looked for where running the script puts it on sys.path: beside the importing file,
    and at the top of data/ (the corpus's `sys.path.insert(0, dirname(dirname(abspath(__file__))))`).
    A module found in neither (numpy, the standard library) is the environment's: not embedded."""
    base = (data if ref_file.resolve().is_relative_to(data.resolve()) else ref_file.parent.parent).resolve()
    ref_path = ref_file.resolve().relative_to(base).as_posix()
    files: dict[str, str] = {}
    modules: list[str] = []
    todo = [ref_file.resolve()]
    while todo:
        path = todo.pop()
        rel = path.relative_to(base).as_posix()
        if rel in files:
            continue
        files[rel] = _text(path)
        for name in _imported_modules(files[rel], path):
            for folder in (path.parent, base):
                module, package = folder / f"{name}.py", folder / name / "__init__.py"
                if module.is_file() or package.is_file():
                    todo += sorted(package.parent.rglob("*.py")) if package.is_file() else [module]
                    modules.append(name)
                    break
    return ref_path, dict(sorted(files.items())), sorted(set(modules))


def _op_of(ref_path: str, data: Path, schema_name: str) -> str:
    """The entry folder that holds the reference script (`softmax` for `softmax/ref_fp64.py`), else
    the op schema's name: entries that share a script share an op, and the corpus's schema names
    (`elementwise`) group ops that compute different functions."""
    parts = ref_path.split("/")
    return parts[0] if len(parts) == 2 and (data / parts[0] / parts[1]).is_file() else schema_name


def _imported_modules(source: str, where: Path) -> list[str]:
    """Top-level names of the absolute imports anywhere in a module."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise EntryError(f"{where}: syntax error at line {exc.lineno}: {exc.msg}") from exc
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module.split(".")[0])
    return list(dict.fromkeys(names))


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise EntryError(f"{path}: unreadable ({exc})") from exc


def _language(source: str) -> str:
    lang = detect_language(source)
    if lang == "torch" and "numpy" in source and "torch" not in source:
        return "numpy"
    return lang


def problem_source_of(
    title: str, dims: dict, inputs: list, ref_path: str, ref_files: dict[str, str], ref_modules: list[str]
) -> str:
    """The KernelBench-form problem of an entry (self-contained: the reference script and the corpus
    modules it imports are embedded, keyed by their paths relative to data/)."""
    sizes = "\n".join(f"{ident} = {cands[0]}" for ident, cands in dims.values())

    def shape(terms: list) -> str:
        parts = [str(t) if isinstance(t, int) else dims[t][0] for t in terms]
        return ", ".join(parts) if parts else "()"

    return render(
        GPUEMU_PROBLEM,
        title=slug(title),
        sizes=sizes,
        ref_files=literal(ref_files),
        ref_path=literal(ref_path),
        helper_modules=literal(ref_modules),
        input_names=literal([n for n, _, _ in inputs]),
        params=", ".join(ident for _, ident, _ in inputs),
        inputs=", ".join(f"torch.randn({shape(terms)})" for _, _, terms in inputs),
    )


def submission_source_of(title: str, inputs: list, kernel_source: str, requires_gpu: bool = False) -> str:
    """The KernelBench-form ModelNew of an entry (self-contained: kernel.py is embedded)."""
    return render(
        GPUEMU_SUBMISSION,
        title=slug(title),
        cuda_only=CUDA_ONLY_MARKER if requires_gpu else "",
        kernel_source=literal(kernel_source),
        input_names=literal([n for n, _, _ in inputs]),
        params=", ".join(ident for _, ident, _ in inputs),
    )


def tolerance_of(tolerances, where: Path) -> dict | None:
    """The entry's absolute tolerance per dtype, as the fuzz oracle's atol for that dtype.

    gpuemu references round a float64 result to the input dtype, so run at the test dtype they carry
    no accumulation error. The generated problem's `round_intermediates` stands in for that run (the
    script with every step rounded once at float32, its farthest of three runs: oracle/reference.py),
    so the `4 x reference-lowp` term is what a correct kernel's roundings add up to where the op is
    ill-conditioned; this atol is the entry's own floor beside it, as the benchmark judges.
    """
    if not tolerances:
        return None
    if not isinstance(tolerances, dict):
        raise EntryError(f"{where}: tolerances must map dtype -> absolute tolerance")
    out = {}
    for key, value in tolerances.items():
        dtype = normalize_dtypes([key], default=())
        try:
            atol = float(value)
        except (TypeError, ValueError) as exc:
            raise EntryError(f"{where}: tolerance {key!r} = {value!r} is not a number") from exc
        if dtype:
            out[dtype[0]] = {"atol": atol}
    return out or None


def inputs_domains(op_schema: dict, inputs: list, where: Path) -> dict:
    """Each input's value domain, keyed by its parameter name in the generated Model: the one the
    entry's op schema names (`"domain"` on an input), else real: gpuemu inputs are real-valued (its
    own fuzzer draws uniform [-10, 10]), so no draw of the generated problem may restrict them."""
    named = {str(e["name"]): e.get("domain") for e in op_schema.get("inputs") or [] if isinstance(e, dict)}
    domains = {}
    for name, ident, _ in inputs:
        domain = named.get(name)
        if domain is None:
            domains[ident] = {"domain": "real", "note": f"gpuemu op_schema names no domain for {name!r}: real-valued"}
        elif domain in DOMAINS:
            domains[ident] = {"domain": domain, "note": f"gpuemu op_schema: {name!r} has domain {domain!r}"}
        else:
            known = ", ".join(DOMAINS)
            raise EntryError(f"{where}: op_schema input {name!r} has domain {domain!r}, not one of {known}")
    return domains


def schema_of(dims: dict, op_schema: dict, domains: dict) -> dict:
    """The problem schema: each dim ranges over min..max of its candidates; candidates kept as data;
    each input's domain (`inputs_domains`)."""
    spec: dict = {
        "dims": {ident: [min(c), max(c)] for ident, c in dims.values()},
        "candidates": {ident: list(c) for ident, c in dims.values()},
    }
    if domains:
        spec["inputs"] = domains
    if op_schema.get("reduction"):
        spec["reduction"] = [dims[str(r)][0] for r in op_schema["reduction"] if str(r) in dims]
    if op_schema.get("family"):
        spec["family"] = str(op_schema["family"])
    return spec
