# The gpuemu preprints' tables (P1-P4), regenerated from one dump, each beside its published values.
# `snakemake results/papers/p3_headline.parquet` builds that table and only what it needs.
# config `papers: {dump: NAME}` picks the dump (default: `corpus` when configured, else the first dump);
# the published tables are read from config/published/ of this repository.
import os

PAPERS = config.get("papers", {})
PAPERS_DUMP = PAPERS.get("dump", "corpus" if "corpus" in DUMPS else DUMPS[0])
if PAPERS_DUMP not in DUMPS:
    raise ValueError(f"config papers.dump: {PAPERS_DUMP!r} is not one of the configured dumps {DUMPS}")
PAPERS_PUBLISHED = PAPERS.get(
    "published", os.path.normpath(os.path.join(workflow.current_basedir, "..", "..", "config", "published"))
)
PAPERS_OPTS = {
    "dump": PAPERS_DUMP,
    "format": config["dumps"][PAPERS_DUMP]["format"],
    "published": PAPERS_PUBLISHED,
    "iterations": int(PAPERS.get("iterations", config.get("study", {}).get("seeds", 8))),
    "strategies": list(PAPERS.get("strategies", config["fuzz"]["strategies"])),
    "multiplier": config["tolerance"]["multiplier"],
    "quantile": config["tolerance"]["quantile"],
    "arch": PAPERS.get("arch", f"sm_{config.get('static', {}).get('archs', [90])[0]}"),
    "fixed_profile": config["fixed"]["profile"],
    "static_sizes": config.get("static", {}).get("sizes", "largest"),
}
PAPER_TABLES = ["p1_verdicts", "p1_headline", "p2_headline", "p2_tightening", "p3_headline", "p3_shape", "p4_paired"]
PAPER_OUTPUTS = expand("results/papers/{table}.{ext}", table=PAPER_TABLES, ext=["parquet", "md"])
PAPER_PUBLISHED = [os.path.join(PAPERS_PUBLISHED, f) for f in ("mapping.csv", "strategies.csv", "tables.yaml")]
PAPER_CASES = {
    "cases": "results/tables/cases.parquet",
    "submissions": "results/tables/submissions.parquet",
}


rule paper_p1_verdicts:
    input:
        **PAPER_CASES,
        published=PAPER_PUBLISHED + [os.path.join(PAPERS_PUBLISHED, "p1_verdicts.csv")],
    output:
        table="results/papers/p1_verdicts.parquet",
        table_md="results/papers/p1_verdicts.md",
    params:
        table="p1_verdicts",
        opts=PAPERS_OPTS,
    log:
        "results/logs/papers/p1_verdicts.log",
    conda:
        CPU_ENV
    script:
        "../scripts/paper_table.py"


rule paper_p1_headline:
    input:
        **PAPER_CASES,
        verdicts="results/papers/p1_verdicts.parquet",
        published=PAPER_PUBLISHED + [os.path.join(PAPERS_PUBLISHED, "p1_headline.csv")],
    output:
        table="results/papers/p1_headline.parquet",
        table_md="results/papers/p1_headline.md",
    params:
        table="p1_headline",
        opts=PAPERS_OPTS,
    log:
        "results/logs/papers/p1_headline.log",
    conda:
        CPU_ENV
    script:
        "../scripts/paper_table.py"


rule paper_p2_headline:
    input:
        **PAPER_CASES,
        manifest=f"results/ingest/{PAPERS_DUMP}/manifest.json",
        published=PAPER_PUBLISHED + [os.path.join(PAPERS_PUBLISHED, f) for f in ("p2_headline.csv", "p2_tightening.csv")],
    output:
        table="results/papers/p2_headline.parquet",
        table_md="results/papers/p2_headline.md",
    params:
        table="p2_headline",
        opts=PAPERS_OPTS,
    log:
        "results/logs/papers/p2_headline.log",
    conda:
        CPU_ENV
    script:
        "../scripts/paper_table.py"


rule paper_p2_tightening:
    input:
        **PAPER_CASES,
        manifest=f"results/ingest/{PAPERS_DUMP}/manifest.json",
        published=PAPER_PUBLISHED + [os.path.join(PAPERS_PUBLISHED, "p2_tightening.csv")],
    output:
        table="results/papers/p2_tightening.parquet",
        table_md="results/papers/p2_tightening.md",
    params:
        table="p2_tightening",
        opts=PAPERS_OPTS,
    log:
        "results/logs/papers/p2_tightening.log",
    conda:
        CPU_ENV
    script:
        "../scripts/paper_table.py"


rule paper_p3_headline:
    input:
        **PAPER_CASES,
        published=PAPER_PUBLISHED + [os.path.join(PAPERS_PUBLISHED, "p3_headline.csv")],
    output:
        table="results/papers/p3_headline.parquet",
        table_md="results/papers/p3_headline.md",
    params:
        table="p3_headline",
        opts=PAPERS_OPTS,
    log:
        "results/logs/papers/p3_headline.log",
    conda:
        CPU_ENV
    script:
        "../scripts/paper_table.py"


rule paper_p3_shape:
    input:
        **PAPER_CASES,
        published=PAPER_PUBLISHED + [os.path.join(PAPERS_PUBLISHED, "p3_shape.csv")],
    output:
        table="results/papers/p3_shape.parquet",
        table_md="results/papers/p3_shape.md",
    params:
        table="p3_shape",
        opts=PAPERS_OPTS,
    log:
        "results/logs/papers/p3_shape.log",
    conda:
        CPU_ENV
    script:
        "../scripts/paper_table.py"


rule paper_p4_paired:
    input:
        **PAPER_CASES,
        pairs="results/tables/static.parquet",
        timing="results/tables/timing.parquet",
        published=PAPER_PUBLISHED + [os.path.join(PAPERS_PUBLISHED, "p4_paired.csv")],
    output:
        table="results/papers/p4_paired.parquet",
        table_md="results/papers/p4_paired.md",
    params:
        table="p4_paired",
        opts=PAPERS_OPTS,
    log:
        "results/logs/papers/p4_paired.log",
    conda:
        CPU_ENV
    script:
        "../scripts/paper_table.py"
