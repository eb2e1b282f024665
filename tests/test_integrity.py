"""The harness's snapshots (`worker/integrity.py`) and its look for child processes (`confine.children`):
what counts as a change, and that a change is still found after the look's fast path has moved on,
with the dicts' version tags read (`worker/dict_versions.py`) and without."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

from rescore.worker import confine, dict_versions, integrity
from rescore.worker.integrity import Snapshot


@pytest.fixture(params=["version tags", "entries only"])
def looks(request, monkeypatch) -> str:
    """Every look both ways: skipping the namespaces whose dict's version tag did not move, and
    comparing every entry (an interpreter whose tags are not read)."""
    if request.param == "entries only":
        monkeypatch.setattr(integrity, "tag_of", lambda ns: None)
    return request.param


def _library() -> types.ModuleType:
    lib = types.ModuleType("lib")
    lib.allclose, lib.matmul = (lambda *a: True), (lambda a, b: a @ b)
    return lib


def test_a_library_module_may_gain_attributes_but_a_change_after_that_is_still_found(looks):
    lib = _library()
    allclose = lib.allclose
    snap = Snapshot([("lib", lib, False)])
    lib.lazy_submodule = types.ModuleType("lib.sub")  # a library's own addition: not a patch
    assert snap.restore() == []
    assert snap.restore() == []
    lib.allclose = lambda *a: False
    assert snap.restore() == ["lib.allclose"] and lib.allclose is allclose
    lib.lazy_submodule = types.ModuleType("lib.other")  # what was added is never the snapshot's
    assert snap.restore() == []
    del lib.matmul
    assert snap.restore() == ["lib.matmul"] and callable(lib.matmul)


def test_a_class_gaining_an_attribute_is_patched_and_undone_every_time(looks):
    class Judge:
        def same(self, a, b):
            return a == b

    snap = Snapshot([("Judge", Judge, True)])
    Judge.__eq__ = lambda self, other: True
    assert snap.restore() == ["Judge.__eq__"] and "__eq__" not in Judge.__dict__
    assert snap.restore() == []
    same = Judge.same
    del Judge.same
    Judge.same = same  # the same function again, now last in the class's order: no change
    assert snap.restore() == []
    Judge.same = lambda self, a, b: True
    assert snap.restore() == ["Judge.same"] and Judge.same is same


def test_a_write_into_a_namespaces_dict_itself_is_found_and_undone(looks):
    """A candidate that writes into a module's or a class's dict directly (no setattr) changes it all
    the same: found on the next look, the fast path's or not, and undone."""
    lib = _library()
    allclose = lib.allclose

    class Judge:
        def same(self, a, b):
            return a == b

    snap = Snapshot([("lib", lib, False), ("Judge", Judge, True)])
    assert snap.restore() == []
    vars(lib)["allclose"] = lambda *a: False
    assert snap.restore() == ["lib.allclose"] and lib.allclose is allclose
    vars(lib).update(matmul=None)
    assert snap.restore() == ["lib.matmul"] and callable(lib.matmul)
    Judge.same = lambda self, a, b: True  # through type.__setattr__
    assert snap.restore() == ["Judge.same"]
    assert snap.restore() == []


def test_a_look_reads_no_entry_of_a_namespace_whose_tag_did_not_move(monkeypatch):
    """With the tags read (as on this CPython), a look after nothing changed reads no namespace's
    entries, and one after a change reads only the changed namespace's."""
    assert dict_versions.AVAILABLE or sys.version_info >= (3, 14), "the tags should be read on this CPython"
    if not dict_versions.AVAILABLE:
        pytest.skip(f"version tags not read on {sys.implementation.name} {sys.version_info[:2]}: entries compared")
    libs = [_library() for _ in range(3)]
    snap = Snapshot([(f"lib{i}", lib, False) for i, lib in enumerate(libs)])
    read = []
    real = integrity._ns
    monkeypatch.setattr(integrity, "_ns", lambda obj: read.append(obj) or real(obj))
    assert snap.restore() == [] and read == []
    libs[1].allclose = lambda *a: False
    assert snap.restore() == ["lib1.allclose"] and read == [libs[1]]
    read.clear()
    assert snap.restore() == [] and read == []


def test_children_are_none_without_a_child_and_name_a_live_one():
    alone = subprocess.run([sys.executable, "-c", "from rescore.worker import confine; print(confine.children())"],
                           capture_output=True, text=True, check=True)
    assert alone.stdout.strip() == "[]"  # a process with no child at all
    before = set(confine.children())  # this test process may hold other tests' workers
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in confine.children()
    finally:
        child.kill()
        child.wait()
    assert set(confine.children()) == before


@pytest.mark.parametrize("copies", [True, False], ids=["copies", "digest"])
def test_a_seal_is_broken_by_any_write_and_by_nothing_else(monkeypatch, copies):
    import torch

    from rescore.worker import integrity
    from rescore.worker.integrity import broken, seal

    if not copies:  # past the copies' size the bytes are hashed instead: the same answers
        monkeypatch.setattr(integrity, "SEAL_COPY_BYTES", 0)
    nan = torch.tensor([float("nan"), 1.0], dtype=torch.float64)
    strided = torch.arange(12.0, dtype=torch.float16).reshape(3, 4).t()  # a layout the candidate gets
    flags = torch.tensor([True, False])
    tensors = [nan, strided, flags, 3]
    sealed = seal(tensors)
    assert isinstance(sealed, tuple) == copies and hash(sealed)  # immutable all through
    assert not broken(tensors, sealed)  # NaN is equal to itself bit for bit
    nan[1] = 1.0  # the same value written back
    assert not broken(tensors, sealed)
    strided[0, 0] = -0.0  # 0.0 before: equal as a number, another bit pattern
    assert broken(tensors, sealed) and not broken([strided], seal([strided]))
    strided[0, 0] = 0.0
    assert not broken(tensors, sealed)
    assert broken(tensors[:1], sealed)  # a tensor fewer
    flags.resize_(1)
    assert broken(tensors, sealed)
