"""The CUDA build identity (`runtime/extensions.py`) and the worker's prebuilt-library state
(`worker/prebuilt.py`): what must not change for the cached builds on a GPU machine to stay valid,
and the state that must survive the harness's restore after every candidate call."""

from __future__ import annotations

import platform

import torch
from torch.utils import cpp_extension

from rescore.runtime.extensions import build_key, call_fingerprint, extensions_dir
from rescore.worker import prebuilt
from rescore.worker.integrity import Harness


def test_the_build_key_is_the_one_every_cached_build_was_recorded_under(monkeypatch):
    """A record counts only under an equal key: a key that gains, loses or renames an entry makes
    every cached build (and every library a worker recorded in `calls/`) build again."""
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    monkeypatch.setenv("CXX", "g++")
    assert build_key() == {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "arch_list": "9.0",
        "cxx": "g++",
        "fingerprint": "content, files' bytes",
        "constructs": 1,
    }
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST")
    monkeypatch.delenv("CXX")
    assert build_key()["arch_list"] is None and build_key()["cxx"] is None


def test_a_call_fingerprint_and_a_source_folder_keep_their_names(tmp_path):
    """The values recorded by the build code before it was split (engine/cuda_build.py at 58ec3c1):
    a worker finds a library by the fingerprint of its call, in the folder named by its source."""

    def load_inline(name, cpp_sources, cuda_sources=None, functions=None, extra_cflags=None,
                    extra_cuda_cflags=None, verbose=False, build_directory=None, is_python_module=True):
        raise AssertionError("only its signature is read")

    args = ("ext_1", "torch::Tensor f(torch::Tensor x);")
    kwargs = dict(cuda_sources="__global__ void k() {}", functions=["f"], extra_cuda_cflags=["-O3"])
    assert call_fingerprint(load_inline, args, kwargs) == "0e6dec3df16d4cbeac1d0c05523e49c4"
    assert call_fingerprint(load_inline, ("ext_2", *args[1:]), dict(kwargs, verbose=True)) == (
        "0e6dec3df16d4cbeac1d0c05523e49c4"  # the name and verbosity are not part of the build
    )
    assert extensions_dir("a CUDA submission's source", tmp_path) == tmp_path.resolve() / "1e8e68695d44060d"


def test_the_harness_leaves_the_prebuilt_state_alone(tmp_path, monkeypatch):
    """`activate` and the libraries remembered change inside candidate calls (a `load_inline` runs at
    the candidate's import); as module globals, the harness would reset them after every call and
    record a patch (R2 in docs/redesign-plan.md). The volatile class keeps them out of its snapshot."""
    monkeypatch.setattr(prebuilt.PrebuiltState, "active", None)
    monkeypatch.setattr(prebuilt.PrebuiltState, "built", {})
    monkeypatch.setattr(cpp_extension, "load_inline", cpp_extension.load_inline)  # activate wraps it
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "before"))
    harness = Harness()
    folder = prebuilt.activate("a CUDA submission's source", tmp_path)
    prebuilt.PrebuiltState.built[(str(folder), "fingerprint")] = (str(folder / "ext"), "ext")

    assert harness.restore() == []
    assert prebuilt.PrebuiltState.active == folder
    assert prebuilt.PrebuiltState.built == {(str(folder), "fingerprint"): (str(folder / "ext"), "ext")}


def test_a_load_calls_source_files_count_by_their_bytes_and_its_build_goes_to_the_sources_folder(tmp_path):
    """CUDA-L1 submissions write their sources into a new temporary folder at each import and `load`
    them from there, some building there too (`build_directory`): the same bytes are the same build
    wherever they lie, and the build goes to the source's folder of the cache, where a worker finds it."""
    from rescore.runtime.extensions import in_extensions_dir

    def load(name, sources, extra_cflags=None, build_directory=None, verbose=False, is_python_module=True):
        raise AssertionError("only its signature is read")

    first, second, other = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for folder, text in ((first, "int f() { return 1; }"), (second, "int f() { return 1; }"),
                         (other, "int f() { return 2; }")):
        folder.mkdir()
        (folder / "k.cpp").write_text(text)
    print_of = {f: call_fingerprint(load, ("ext", [str(f / "k.cpp")]), {"build_directory": str(f)})
                for f in (first, second, other)}
    assert print_of[first] == print_of[second] != print_of[other]
    assert call_fingerprint(load, ("ext", str(first / "k.cpp")), {}) == print_of[first]  # one path, not a list
    assert in_extensions_dir(load, ("ext", ["k.cpp"], None, str(first)), {"verbose": True}) == (
        (), {"name": "ext", "sources": ["k.cpp"], "extra_cflags": None, "verbose": True})
    assert in_extensions_dir(load, ("ext", ["k.cpp"]), {}) == (("ext", ["k.cpp"]), {})
