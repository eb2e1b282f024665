"""Offline static PTX metrics of Triton submissions (sm_90 and sm_80, no GPU needed).

launches: capture the launches a submission makes under the interpreter; compile: compile them
with triton.compile for a GPUTarget and run ptxas -v; metrics: numbers from PTX text; study:
tables pairing bug variants with their controls; figures; report: one kernel as text.
Importing this package does not import triton (capture needs TRITON_INTERPRET set first).
"""

from rescore.static.compile import compile_launches, compile_many
from rescore.static.launches import capture_launches, capture_many
from rescore.static.metrics import CLASSES, METRIC_COLUMNS, kernel_metrics, ptx_hash
from rescore.static.report import describe_kernel
from rescore.static.study import class_summary, paired_deltas, static_figures, static_table

__all__ = [
    "CLASSES",
    "METRIC_COLUMNS",
    "capture_launches",
    "capture_many",
    "class_summary",
    "compile_launches",
    "compile_many",
    "describe_kernel",
    "kernel_metrics",
    "paired_deltas",
    "ptx_hash",
    "static_figures",
    "static_table",
]
