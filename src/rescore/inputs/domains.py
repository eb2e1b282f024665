"""The value domain of each input, read from the problem's own `get_inputs()` source: the interval its
values can take (`torch.randn` any real, `torch.rand` [0, 1), `.abs()` from 0, `torch.randint(0, 5)`
0..4, arithmetic on those), worked out with interval arithmetic over the expression that makes it.

This is the certain evidence: an interval is a bound on every value the factory can ever produce, not
a guess from a draw. An expression it does not know gives no answer (None), and the caller falls back
on sampling (worker/input_domains.py).
"""

from __future__ import annotations

import ast
import math

Interval = tuple[float, float]
INF = math.inf
REAL: Interval = (-INF, INF)

# Calls that return their operand's values unchanged (views, copies, casts among floating types).
_SAME = frozenset({
    "float", "double", "half", "bfloat16", "to", "cuda", "cpu", "contiguous", "clone", "detach", "view", "reshape",
    "permute", "transpose", "t", "expand", "expand_as", "repeat", "unsqueeze", "squeeze", "flatten", "requires_grad_",
    "type_as", "view_as", "reshape_as", "narrow", "flip", "roll",
})
_MODULE_ROOTS = frozenset({"torch", "F", "nn", "functional", "math"})


def domain_of(interval: Interval) -> str:
    """The fuzzer's domain for an input whose values lie in `interval`."""
    lo, hi = interval
    if lo >= 0:
        return "unit" if hi <= 1 else "positive"
    return "real"


def describe(interval: Interval) -> str:
    lo, hi = interval
    return f"[{lo:g}, {hi:g}]"


def source_intervals(source: str, constants: dict[str, float]) -> list[tuple[Interval | None, str]] | None:
    """Per input `get_inputs()` returns: the interval its values lie in (None when the expression is
    not one this reads) and the expression, as written; None when the function or its returned list
    cannot be read. `constants`: the module's numeric names (sizes, scales)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_inputs"), None)
    if fn is None:
        return None
    reader = _Reader(constants)
    for statement in fn.body:
        if isinstance(statement, ast.Return):
            value = statement.value
            if not isinstance(value, (ast.List, ast.Tuple)) or any(isinstance(e, ast.Starred) for e in value.elts):
                return None
            return [(reader.interval(e), reader.text(e)) for e in value.elts]
        reader.statement(statement)
    return None


class _Reader:
    """Intervals of the expressions of one function body, statement by statement."""

    def __init__(self, constants: dict[str, float]):
        self.constants = constants
        self.env: dict[str, Interval | None] = {}
        self.texts: dict[str, str] = {}

    def statement(self, node: ast.stmt) -> None:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            self.env[name], self.texts[name] = self.interval(node.value), self.text(node.value)
            return
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            name = node.target.id
            combined = ast.BinOp(ast.Name(name, ast.Load()), node.op, node.value)
            self.env[name], self.texts[name] = self.interval(combined), self.text(combined)
            return
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            return  # a docstring
        for sub in ast.walk(node):  # anything else: every name it binds is unknown from here on
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                self.env[sub.id] = None

    def text(self, node: ast.expr) -> str:
        """The expression as written, with each local name replaced by what made it."""
        written = ast.unparse(node)
        return self.texts[written] if written in self.texts else written

    def interval(self, node: ast.expr) -> Interval | None:
        if isinstance(node, ast.Constant):
            return _point(node.value)
        if isinstance(node, ast.Name):
            return self.env[node.id] if node.id in self.env else _point(self.constants.get(node.id))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            inner = self.interval(node.operand)
            return None if inner is None else (-inner[1], -inner[0]) if isinstance(node.op, ast.USub) else inner
        if isinstance(node, ast.BinOp):
            return _binary(node.op, self.interval(node.left), self.interval(node.right))
        if isinstance(node, ast.Attribute) and node.attr in ("T", "mT", "data"):
            return self.interval(node.value)
        if isinstance(node, ast.Subscript):
            return self.interval(node.value)
        if isinstance(node, ast.Call):
            return self.call(node)
        return None

    def call(self, node: ast.Call) -> Interval | None:
        func = node.func
        method = isinstance(func, ast.Attribute) and not _is_module(func.value)
        if isinstance(func, ast.Name) or (isinstance(func, ast.Attribute) and not method):
            name = func.id if isinstance(func, ast.Name) else func.attr  # type: ignore[union-attr]
            operand, rest = (node.args[0], node.args[1:]) if node.args else (None, [])
        elif isinstance(func, ast.Attribute):
            name, operand, rest = func.attr, func.value, list(node.args)
        else:
            return None
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        if name in ("randn", "randn_like", "normal"):
            return REAL
        if name in ("rand", "rand_like"):
            return (0.0, 1.0)
        if name in ("ones", "ones_like"):
            return (1.0, 1.0)
        if name in ("zeros", "zeros_like"):
            return (0.0, 0.0)
        if name == "randint":
            return self.randint(node.args, keywords)
        if name in ("cat", "stack", "concat") and isinstance(operand, (ast.List, ast.Tuple)):
            parts = [self.interval(e) for e in operand.elts]
            known = [p for p in parts if p is not None]
            return (min(p[0] for p in known), max(p[1] for p in known)) if known and len(known) == len(parts) else None
        inner = self.interval(operand) if operand is not None else None
        return None if inner is None else self.unary(name, inner, list(rest), keywords)

    def unary(self, name: str, inner: Interval, rest: list[ast.expr], keywords: dict) -> Interval | None:
        """The interval of `name` applied to an operand in `inner` (`rest`: its other arguments)."""
        lo, hi = inner
        if name in _SAME:
            return inner
        if name in ("tril", "triu"):
            return (min(lo, 0.0), max(hi, 0.0))
        if name == "abs":
            return (0.0 if lo <= 0 <= hi else min(abs(lo), abs(hi)), max(abs(lo), abs(hi)))
        if name == "exp":
            return (_exp(lo), _exp(hi))
        if name == "sigmoid":
            return (_sigmoid(lo), _sigmoid(hi))
        if name == "tanh":
            return (math.tanh(lo), math.tanh(hi))
        if name == "relu":
            return (max(lo, 0.0), max(hi, 0.0))
        if name == "softmax":
            return (0.0, 1.0)
        if name == "log_softmax":
            return (-INF, 0.0)
        if name in ("clamp", "clip", "clamp_min", "clamp_max"):
            low = keywords.get("min", rest[0] if rest and name != "clamp_max" else None)
            high = keywords.get("max", rest[0] if rest and name == "clamp_max" else rest[1] if len(rest) > 1 else None)
            bounds = [self.interval(b) if b is not None else None for b in (low, high)]
            if any(b is not None and v is None for b, v in zip((low, high), bounds)):
                return None
            return (max(lo, bounds[0][0]) if bounds[0] else lo, min(hi, bounds[1][1]) if bounds[1] else hi)
        return None

    def randint(self, args: list[ast.expr], keywords: dict) -> Interval | None:
        """torch.randint(high, size) or (low, high, size): the integers low..high-1."""
        low_node = keywords.get("low", args[0] if len(args) >= 3 else None)
        high_node = keywords.get("high", args[1] if len(args) >= 3 else args[0] if args else None)
        low = self.interval(low_node) if low_node is not None else (0.0, 0.0)
        high = self.interval(high_node) if high_node is not None else None
        return None if low is None or high is None else (low[0], high[1] - 1)


def _point(value: object) -> Interval | None:
    """A number as an interval of one value; None for anything else."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (float(value), float(value))
    return None


def _is_module(node: ast.expr) -> bool:
    """Whether `node` names a module (`torch`, `torch.nn.functional`, `F`): a call on it is a function."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name) and node.id in _MODULE_ROOTS


def _exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return INF


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + _exp(-x))


def _mul(a: float, b: float) -> float:
    return 0.0 if a == 0 or b == 0 else a * b


def _binary(op: ast.operator, left: Interval | None, right: Interval | None) -> Interval | None:
    if left is None or right is None:
        return None
    (a, b), (c, d) = left, right
    if isinstance(op, ast.Add):
        return (a + c, b + d)
    if isinstance(op, ast.Sub):
        return (a - d, b - c)
    if isinstance(op, ast.Mult):
        products = [_mul(a, c), _mul(a, d), _mul(b, c), _mul(b, d)]
        return (min(products), max(products))
    if isinstance(op, ast.Div) and (c > 0 or d < 0):
        return _binary(ast.Mult(), left, (1 / d, 1 / c))
    if isinstance(op, ast.Pow) and c == d and float(c).is_integer() and c >= 0:
        n = int(c)
        if n % 2 == 0 and a < 0 < b:
            return (0.0, max(a**n, b**n) if math.isfinite(a) and math.isfinite(b) else INF)
        if a >= 0 or n % 2 == 1:
            return (_pow(a, n), _pow(b, n))
        return (_pow(b, n), _pow(a, n))  # both ends negative, even power
    return None


def _pow(x: float, n: int) -> float:
    try:
        return x**n
    except OverflowError:
        return INF if x > 0 or n % 2 == 0 else -INF
