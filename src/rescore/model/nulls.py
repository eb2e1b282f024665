"""The null candidates of a problem: the weakest answers that know the output's shape (zeros, the
reference's mean, an input passed through, noise of the output's scale). One that passes a
benchmark's own check shows that check cannot tell a kernel from nothing (the degenerate-problems
table, `engine/degenerate.py`); each is derived from the reference's output in `oracle/fixed.py`."""

from __future__ import annotations

NULLS: tuple[str, ...] = ("zeros", "mean", "input", "noise")
