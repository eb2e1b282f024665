"""The gpuemu preprints' tables (P1-P4) regenerated from rescore's cases, each beside its published values.

published: the transcribed tables and their parsing; match: paper kernel -> rescore submission;
p1..p4: one table builder per paper; render: Markdown; stage: the Snakemake stage over them.
"""
