"""Static numbers of one compiled kernel, as pure functions of its PTX text and ptxas' report.

Why: a seeded bug that changes the kernel's structure (a dropped multiply, `=` for `+=`) moves
these numbers, a bug that only changes a constant does not. To tell "same numbers" from "same
code", the PTX also gets a hash of its normalised text (comments, debug info, names, register and
label numbering removed), so two kernels that differ only in an immediate have equal metrics but
different hashes.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from typing import NamedTuple

# Instruction classes, in the order the tables show them.
CLASSES: tuple[str, ...] = (
    "ld_global",
    "st_global",
    "ld_shared",
    "st_shared",
    "ld_local",
    "st_local",
    "mem_other",
    "async_copy",
    "atomic",
    "tensor_core",
    "special",
    "float_arith",
    "int_arith",
    "compare_select",
    "convert",
    "move",
    "warp",
    "barrier",
    "control",
    "other",
)

# The metric vector a "any metric differs" gate looks at (the PTX hash is deliberately not in it).
METRIC_COLUMNS: tuple[str, ...] = (
    "registers",
    "spill_bytes",
    "shared",
    "local",
    "instructions",
    *(f"n_{c}" for c in CLASSES),
    "predicated_mem",
    "immediates",
)

# Reported beside METRIC_COLUMNS but not in the gate's vector: it moves with the instructions that
# define the registers, so it adds nothing to "any metric differs".
EXTRA_COLUMNS: tuple[str, ...] = ("ptx_registers",)

_FLOAT_TYPES = {"f16", "f16x2", "bf16", "bf16x2", "f32", "f64", "e4m3", "e5m2", "e4m3x2", "e5m2x2", "tf32"}
_ARITH = {
    "add",
    "sub",
    "mul",
    "mad",
    "fma",
    "div",
    "rem",
    "abs",
    "neg",
    "min",
    "max",
    "and",
    "or",
    "xor",
    "not",
    "cnot",
    "shl",
    "shr",
    "popc",
    "clz",
    "brev",
    "bfe",
    "bfi",
    "bfind",
    "prmt",
    "lop3",
    "shf",
    "copysign",
    "testp",
    "sad",
    "dp4a",
    "dp2a",
    "fns",
    "mul24",
    "mad24",
    "madc",
    "addc",
    "subc",
}
_SPECIAL = {"ex2", "lg2", "rsqrt", "sqrt", "rcp", "sin", "cos", "tanh"}
_BARRIER = {"bar", "barrier", "membar", "fence", "mbarrier", "griddepcontrol", "elect"}
_CONTROL = {"bra", "brx", "ret", "exit", "call", "trap", "brkpt", "nanosleep"}
_WARP = {"shfl", "vote", "redux", "match", "activemask"}
_COMPARE = {"setp", "selp", "set", "slct"}
_MOVE = {"mov", "cvta", "isspacep", "mapa", "getctarank"}
_MEMORY_ROOTS = {"ld", "ldu", "st", "atom", "red", "cp", "ldmatrix", "stmatrix", "prefetch", "multimem"}

_COMMENT_BLOCK = re.compile(r"/\*.*?\*/", re.S)
_COMMENT_LINE = re.compile(r"//[^\n]*")
_IMMEDIATE = re.compile(
    r"(?<![\w%$.])(0[fF][0-9a-fA-F]{8}|0[dD][0-9a-fA-F]{16}|0[xX][0-9a-fA-F]+|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"
    r"(?![\w.])"
)
_REGISTER = re.compile(r"%([A-Za-z_]+)(\d+)\b")
_LABEL = re.compile(r"\$L__\w+")
_LEADING_LABELS = re.compile(r"^(?:[\w$]+:\s*)+")
_FUNC_NAME = re.compile(r"\.(?:entry|func)\s+(?:\([^)]*\)\s*)?([A-Za-z_$][\w$]*)")


class Instruction(NamedTuple):
    """One PTX instruction: guard predicate ('' when unguarded), opcode with qualifiers, operands."""

    guard: str
    opcode: str
    operands: str

    @property
    def root(self) -> str:
        return self.opcode.split(".", 1)[0]

    @property
    def qualifiers(self) -> list[str]:
        return self.opcode.split(".")[1:]


_REG_DECLARATION = re.compile(r"^\s*\.reg\s+(?:\.v\d+\s+)?\.\w+\s+([^;]+);", re.M)
_REG_RANGE = re.compile(r"\s*%\w+<(\d+)>\s*")


def ptx_registers(ptx: str) -> int:
    """Virtual registers the PTX declares (`.reg .b32 %r<12>;` declares 12, `%r1, %r2` two): the
    count before ptxas allocates physical registers (`registers`)."""
    total = 0
    for m in _REG_DECLARATION.finditer(strip_comments(ptx)):
        for item in m.group(1).split(","):
            n = _REG_RANGE.fullmatch(item)
            total += int(n.group(1)) if n else 1
    return total


def strip_comments(ptx: str) -> str:
    """PTX without /* */ and // comments."""
    return _COMMENT_LINE.sub("", _COMMENT_BLOCK.sub("", ptx))


def _drop_debug_sections(lines: list[str]) -> list[str]:
    """Remove `.section .debug_*` blocks (DWARF bytes, they carry file paths and names)."""
    out: list[str] = []
    skipping = depth = 0
    for line in lines:
        s = line.strip()
        if not skipping and s.startswith(".section") and ".debug" in s:
            skipping, depth = 1, 0
            continue
        if skipping:
            depth += s.count("{") - s.count("}")
            if depth <= 0 and "}" in s:
                skipping = 0
            continue
        out.append(line)
    return out


def _body_lines(ptx: str) -> list[str]:
    """Stripped, non-empty code lines of every function body (inside the outermost braces)."""
    lines = _drop_debug_sections(strip_comments(ptx).splitlines())
    out: list[str] = []
    depth = 0
    for line in lines:
        s = line.strip()
        if not s:
            continue
        opens, closes = s.count("{"), s.count("}")
        if depth > 0:
            out.append(s)
        # braces inside an instruction's operand list ({ %r1, %r2 }) balance on the same line
        depth += opens - closes
    return out


def instructions(ptx: str) -> list[Instruction]:
    """Every instruction inside function bodies; directives, labels and scope braces are skipped."""
    result: list[Instruction] = []
    for line in _body_lines(ptx):
        if line.startswith(".") or line in ("{", "}"):
            continue
        for stmt in line.split(";"):
            s = _LEADING_LABELS.sub("", stmt.strip()).lstrip("{}").strip()
            if not s or s.startswith("."):
                continue
            guard = ""
            if s.startswith("@"):
                guard, _, s = s.partition(" ")
                s = s.strip()
            opcode, _, operands = s.partition(" ")
            if not re.match(r"^[a-z]", opcode):
                continue
            result.append(Instruction(guard, opcode, operands.strip()))
    return result


def classify(opcode: str) -> str:
    """Class of an opcode ('ld.global.v4.b32' -> 'ld_global'); one of CLASSES."""
    parts = opcode.split(".")
    root, quals = parts[0], set(parts[1:])
    if root in ("ld", "ldu"):  # state space decides; generic, param and const go to mem_other
        if "global" in quals:
            return "ld_global"
        if any(q.startswith("shared") for q in quals):
            return "ld_shared"
        if "local" in quals:
            return "ld_local"
        return "mem_other"
    if root == "st":
        if "global" in quals:
            return "st_global"
        if any(q.startswith("shared") for q in quals):
            return "st_shared"
        if "local" in quals:
            return "st_local"
        return "mem_other"
    if root == "ldmatrix":
        return "ld_shared"
    if root == "stmatrix":
        return "st_shared"
    if root == "cp" and ("async" in quals or "reduce" in quals):
        return "async_copy"
    if root in ("atom", "red") or (root == "multimem" and "red" in quals):
        return "atomic"
    if root in ("mma", "wgmma", "wmma", "tcgen05"):
        return "tensor_core"
    if root in _SPECIAL:
        return "special"
    if root in _ARITH:
        return "float_arith" if quals & _FLOAT_TYPES else "int_arith"
    if root in _COMPARE:
        return "compare_select"
    if root in ("cvt", "cvt_packfloat"):
        return "convert"
    if root in _MOVE:
        return "move"
    if root in _WARP:
        return "warp"
    if root in _BARRIER:
        return "barrier"
    if root in _CONTROL:
        return "control"
    return "other"


def histogram(insts: list[Instruction]) -> dict[str, int]:
    """Count of instructions per class, every class present (zeros included)."""
    counts = Counter(classify(i.opcode) for i in insts)
    return {c: counts.get(c, 0) for c in CLASSES}


def predicated_memory_ops(insts: list[Instruction]) -> int:
    """Memory instructions under a guard predicate: how Triton lowers masked loads and stores."""
    return sum(1 for i in insts if i.guard and i.root in _MEMORY_ROOTS)


def _immediate_value(tok: str) -> str:
    """Integers compare by value (0x10 == 16); float bit patterns and decimals by their text."""
    t = tok.lower()
    if t.startswith("0x"):
        return str(int(t, 16))
    if re.fullmatch(r"-?\d+", t):
        return str(int(t))
    return t


def immediates(insts: list[Instruction]) -> set[str]:
    """Distinct literal constants in instruction operands (ints, hex, 0f/0d float bit patterns)."""
    found: set[str] = set()
    for i in insts:
        for m in _IMMEDIATE.finditer(i.operands):
            found.add(_immediate_value(m.group(1)))
    return found


def function_names(ptx: str) -> list[str]:
    """Names of the .entry and .func symbols, in order of appearance."""
    names: list[str] = []
    for m in _FUNC_NAME.finditer(strip_comments(ptx)):
        if m.group(1) not in names:
            names.append(m.group(1))
    return names


def normalize_ptx(ptx: str) -> str:
    """PTX text that two builds of the same code share: no comments, debug info, names, numbering.

    Dropped: comments, .loc/.file lines, DWARF sections, debug labels ($L__tmp, $L__func_*),
    .reg declarations (their counts follow the numbering). Renamed in order of first appearance:
    function names (and their _param_N symbols), registers per class, branch labels.
    """
    lines = _drop_debug_sections(strip_comments(ptx).splitlines())
    kept: list[str] = []
    for line in lines:
        s = " ".join(line.split())
        if not s or s.startswith((".loc", ".file", ".reg", "@@DWARF")):
            continue
        if re.fullmatch(r"\$L__(tmp|func_begin|func_end)\d*:", s):
            continue
        kept.append(s)
    text = "\n".join(kept)
    for n, name in enumerate(function_names(ptx)):
        text = re.sub(rf"(?<![\w$]){re.escape(name)}(?=_param_\d|[^\w$]|$)", f"__fn{n}", text)
    regs: dict[str, str] = {}
    per_class: Counter[str] = Counter()

    def _reg(m: re.Match[str]) -> str:
        tok = m.group(0)
        if tok not in regs:
            cls = m.group(1)
            regs[tok] = f"%{cls}{per_class[cls]}"
            per_class[cls] += 1
        return regs[tok]

    text = _REGISTER.sub(_reg, text)
    labels: dict[str, str] = {}
    text = _LABEL.sub(lambda m: labels.setdefault(m.group(0), f"$L{len(labels)}"), text)
    return text


def ptx_hash(ptx: str) -> str:
    """sha256 of the normalised PTX (16 hex digits are enough to tell kernels apart)."""
    return hashlib.sha256(normalize_ptx(ptx).encode()).hexdigest()[:16]


_PTXAS_FN = re.compile(r"(?:Compiling entry function|Function properties for)\s+'?([\w$.]+)'?")
_PTXAS_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_USED = re.compile(r"Used (\d+) registers")
_PTXAS_SMEM = re.compile(r"(\d+) bytes smem")
_PTXAS_BARRIERS = re.compile(r"used (\d+) barriers")


def parse_ptxas_info(text: str) -> dict[str, dict[str, int]]:
    """Per-function numbers from `ptxas -v` output: registers, stack frame, spills, static smem."""
    out: dict[str, dict[str, int]] = {}
    current: str | None = None
    for line in text.splitlines():
        m = _PTXAS_FN.search(line)
        if m:
            current = m.group(1)
            out.setdefault(
                current,
                {
                    "registers": 0,
                    "stack_frame": 0,
                    "spill_stores": 0,
                    "spill_loads": 0,
                    "smem": 0,
                    "barriers": 0,
                },
            )
            continue
        if current is None:
            continue
        info = out[current]
        if m := _PTXAS_FRAME.search(line):
            info["stack_frame"], info["spill_stores"], info["spill_loads"] = map(int, m.groups())
        if m := _PTXAS_USED.search(line):
            info["registers"] = int(m.group(1))
        if m := _PTXAS_SMEM.search(line):
            info["smem"] = int(m.group(1))
        if m := _PTXAS_BARRIERS.search(line):
            info["barriers"] = int(m.group(1))
    return out


def kernel_metrics(ptx: str, ptxas_info: str | dict | None = None, shared_dynamic: int = 0) -> dict:
    """The flat metric record of one kernel: METRIC_COLUMNS, EXTRA_COLUMNS, the spill split and the PTX hash.

    `ptxas_info` is `ptxas -v` text or its parsed dict (the entry function is used); without it
    the ptxas-derived numbers are None. `shared_dynamic` is the shared memory Triton requests at
    launch (metadata["shared"]); static shared memory from ptxas is added to it.
    """
    insts = instructions(ptx)
    hist = histogram(insts)
    info = parse_ptxas_info(ptxas_info) if isinstance(ptxas_info, str) else (ptxas_info or {})
    names = function_names(ptx)
    entry = next((info[n] for n in names if n in info), None)
    if entry is None and info:
        entry = next(iter(info.values()))
    rec: dict = {
        "registers": entry["registers"] if entry else None,
        "spill_stores": entry["spill_stores"] if entry else None,
        "spill_loads": entry["spill_loads"] if entry else None,
        "spill_bytes": entry["spill_stores"] + entry["spill_loads"] if entry else None,
        "shared": int(shared_dynamic) + (entry["smem"] if entry else 0),
        "local": entry["stack_frame"] if entry else None,
        "instructions": len(insts),
    }
    rec.update({f"n_{c}": hist[c] for c in CLASSES})
    rec["predicated_mem"] = predicated_memory_ops(insts)
    rec["immediates"] = len(immediates(insts))
    rec["ptx_registers"] = ptx_registers(ptx)
    rec["ptx_hash"] = ptx_hash(ptx)
    return rec
