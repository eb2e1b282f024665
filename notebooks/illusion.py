# %% [markdown]
# # The illusion table, read back from Parquet
#
# Loads `results/tables/illusion.parquet` (made by `snakemake --cores 8 all`) and redraws the
# verdicts figure from it: one row per kernel, the benchmark's fixed-shape verdict beside the fuzz
# verdict. Run it as a script (`python notebooks/illusion.py`) or open it as a percent-format
# notebook (Jupytext, VS Code).

# %%
import os
from pathlib import Path

import pandas as pd

RESULTS = Path(os.environ.get("RESCORE_RESULTS", "results"))
illusion = pd.read_parquet(RESULTS / "tables" / "illusion.parquet")
cases = pd.read_parquet(RESULTS / "tables" / "cases.parquet")

# %% [markdown]
# How many kernels does the fixed-shape check pass that fuzzing flags, per label?

# %%
summary = illusion.groupby("label").agg(
    kernels=("name", "size"),
    fixed_pass=("fixed_verdict", lambda v: int((v == "pass").sum())),
    fuzz_flagged=("fuzz_verdict", lambda v: int((v == "flagged").sum())),
    illusions=("illusion", "sum"),
)
print(summary.to_string())

# %%
outcomes = cases[cases["oracle"] == "fuzz"].groupby("outcome").size().sort_values(ascending=False)
print(outcomes.to_string())

# %% [markdown]
# The verdicts figure, redrawn from the table alone.

# %%
from rescore.analysis.figures import verdicts_figure  # noqa: E402

out = RESULTS / "figures" / "verdicts_notebook.png"
verdicts_figure(illusion, [str(out)])
print(f"wrote {out}")
