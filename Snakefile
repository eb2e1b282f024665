# rescore: re-score GPU kernels. Rules live in workflow/rules/, one file per stage; logic lives in src/rescore.
include: "workflow/rules/common.smk"
include: "workflow/rules/dumps.smk"
include: "workflow/rules/ingest.smk"
include: "workflow/rules/check.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/study.smk"
include: "workflow/rules/static.smk"
include: "workflow/rules/papers.smk"
include: "workflow/rules/timing.smk"
include: "workflow/rules/sanitize.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/report.smk"


rule all:
    input:
        ALL_OUTPUTS,
        PAPER_OUTPUTS,
        SANITIZER_OUTPUTS,  # last: built from the others, read by none (workflow/rules/sanitize.smk)
    default_target: True
