"""The example config that README.md ("Add a benchmark dump") and docs/dumps.md give for the papers'
gpuemu corpus and CUDA-L1 runs as written (issue 28, item 6): its block, read from the page itself,
validates and ingests against fixtures in the real layouts (tests/fixtures/dumps/gpuemu holds
`softmax_llm_buggy`, seeded from `softmax` as in the real corpus), every control it names exists."""

from __future__ import annotations

import re

import pytest
import yaml
from conftest import REPO

from rescore.ingest import read_dump

FIX = REPO / "tests" / "fixtures" / "dumps"
# where each example dump's data lies in this repository, in the layout the page's path names
FIXTURE_PATHS = {"gpuemu": FIX / "gpuemu" / "data", "cudal1": FIX / "cudal1" / "optimized_cuda_code" / "h100_xsm.json"}


def example_block(page: str) -> dict:
    """The page's yaml block that configures the papers' dumps (a `papers:` key and a gpuemu dump)."""
    text = (REPO / page).read_text()
    for block in re.findall(r"```yaml\n(.*?)```", text, re.DOTALL):
        doc = yaml.safe_load(block)
        if isinstance(doc, dict) and "papers" in doc and any(
                (d or {}).get("format") == "gpuemu" for d in (doc.get("dumps") or {}).values()):
            return doc
    raise AssertionError(f"{page}: no yaml block with `papers:` and a gpuemu dump")


@pytest.mark.parametrize("page", ["README.md", "docs/dumps.md"])
def test_the_example_config_validates_and_ingests_as_written(page):
    import jsonschema

    block = example_block(page)
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config.update(block)
    jsonschema.validate(config, yaml.safe_load((REPO / "config" / "config.schema.yaml").read_text()))
    assert config["papers"]["dump"] in block["dumps"]
    for name, spec in block["dumps"].items():
        assert spec["path"].endswith(FIXTURE_PATHS[spec["format"]].name)  # the same layout as the page's
        subs = read_dump(name, dict(spec, path=str(FIXTURE_PATHS[spec["format"]])))  # controls checked here
        assert subs and not [s for s in subs if (s.extra or {}).get("ingest_error")], name
        names = {s.name for s in subs}
        assert all(s.control in names for s in subs if s.control), name
        if spec["format"] == "gpuemu":
            by_name = {s.name: s for s in subs}
            assert by_name["softmax_llm_buggy"].control == "softmax"
            assert all(s.control for s in subs if s.label == "buggy")


def test_readme_and_docs_give_the_same_block():
    assert example_block("README.md") == example_block("docs/dumps.md")
