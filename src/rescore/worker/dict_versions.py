"""Whether a namespace changed since the last look, without reading its entries: CPython keeps a
version tag in every dict (`ma_version_tag`, PEP 509), moved by every insertion, replacement and
deletion. The harness looks at 160 namespaces (6,556 attributes) after every call into candidate
code (`integrity.Snapshot.restore`); comparing every entry took 0.2 ms a look, most of a small
kernel's case. Reading 160 tags takes a tenth of that.

The tag is read through ctypes at its place in the dict's C struct, so it is used only where a
self-test at import shows it behaving as documented on this interpreter (a change moves it, a read
does not); elsewhere (PyPy, a CPython that dropped the field) `tag_of` answers None and every look
compares the entries, as before. Native code could change a dict without moving the tag, as it could
get past the harness in other ways (`confine.py` says so).
"""

from __future__ import annotations

import ctypes
import gc
import sys
from collections.abc import Mapping

# PyDictObject: PyObject_HEAD, Py_ssize_t ma_used, uint64_t ma_version_tag (CPython 3.6 to 3.13).
_OFFSET = object.__basicsize__ + ctypes.sizeof(ctypes.c_ssize_t)


def _reader(d: dict) -> ctypes.c_uint64:
    return ctypes.c_uint64.from_address(id(d) + _OFFSET)


def _self_test() -> bool:
    """The tag moves on every kind of change and stays on a read, on a dict of this interpreter."""
    if sys.implementation.name != "cpython" or not (3, 6) <= sys.version_info[:2] <= (3, 13):
        return False
    d = {"a": object()}
    tag = _reader(d)
    seen = [tag.value]
    _ = d["a"], list(d.items()), "a" in d
    seen.append(tag.value)  # read only: unmoved
    d["a"] = object()
    seen.append(tag.value)  # replaced
    d["b"] = 1
    seen.append(tag.value)  # added
    del d["a"]
    seen.append(tag.value)  # deleted
    probe = type("Probe", (), {})
    inner = dict_of(probe.__dict__)
    if inner is None:
        return False
    cls_tag = _reader(inner)
    before = cls_tag.value
    probe.x = 1  # a class's attribute, through type.__setattr__
    return seen[0] == seen[1] and len(set(seen[1:])) == 4 and cls_tag.value != before


def dict_of(ns: Mapping) -> dict | None:
    """The dict behind a namespace (`integrity._ns`): a module's own, or the one a class's mappingproxy
    wraps (its only referent)."""
    if isinstance(ns, dict):
        return ns
    inner = [r for r in gc.get_referents(ns) if isinstance(r, dict)]
    return inner[0] if len(inner) == 1 else None


AVAILABLE = _self_test()


class Tag:
    """One namespace's version tag, read in place."""

    __slots__ = ("_dict", "_reader", "seen")

    def __init__(self, d: dict):
        self._dict = d  # held: the reader points into it
        self._reader = _reader(d)
        self.seen = self._reader.value

    def now(self) -> int:
        return self._reader.value

    def unchanged(self) -> bool:
        """No change since the value last noted (`seen`)."""
        return self._reader.value == self.seen


def tag_of(ns: Mapping) -> Tag | None:
    """The version tag of a namespace (`integrity._ns`), or None where tags are not read on this
    interpreter."""
    if not AVAILABLE:
        return None
    d = dict_of(ns)
    return Tag(d) if d is not None else None
