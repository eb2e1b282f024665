# The two commands a user needs: `make all` (set up, then run the main job) and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CORES ?= 8
TEST_JOBS ?= 2  # pytest-xdist processes: the tests spawn workers and Snakemake runs of their own

.PHONY: all test venv lint clean bench

# On a terminal, `rescore progress` shows one progress line and sends Snakemake's output to
# results/logs/snakemake.out; anywhere else it runs Snakemake as it is.
all: $(BIN)/rescore
	$(BIN)/rescore progress -- $(BIN)/snakemake --cores $(CORES) all

test: $(BIN)/rescore
	$(BIN)/ruff check src tests workflow/scripts bench tools scripts
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q -n $(TEST_JOBS)

venv: $(BIN)/rescore

$(BIN)/rescore: requirements/cpu.txt requirements/common.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -r requirements/cpu.txt
	$(BIN)/pip install -q --no-deps -e .
	touch $(BIN)/rescore

lint: $(BIN)/rescore
	$(BIN)/ruff check src tests workflow/scripts bench tools scripts
	$(BIN)/lint-imports
	$(BIN)/snakemake --lint

bench: $(BIN)/rescore
	$(BIN)/python bench/pipeline_bench.py pipeline --cores $(CORES)

clean:
	rm -rf results/tables results/cases results/ingest results/figures results/failures results/logs results/progress .snakemake
