"""rescore: re-score GPU kernels submitted to public benchmarks.

Every submission runs twice: under the benchmark's own fixed-shape check, reproduced exactly, and
under seeded, op-schema-aware fuzzing against a float64 reference.
"""

__version__ = "0.1.0"
