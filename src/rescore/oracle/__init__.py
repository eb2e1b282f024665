"""Oracles: the benchmark's fixed-shape check, the float64 reference, comparison and tolerances."""
