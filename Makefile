# headsweep: `make help` lists the targets. On a fresh clone, `make train` and `make test` set
# everything up themselves (a .venv with the CPU build of torch, then this package).
.DEFAULT_GOAL := help
SHELL := /bin/bash
PY := .venv/bin/python
TORCH := torch==2.13.0
SETUP_STAMP := .venv/.setup-done
export WANDB_MODE ?= offline
export WANDB_SILENT ?= true
export HYDRA_FULL_ERROR ?= 0

# Hydra overrides for any training target, e.g. make train ARGS="model.heads=4 seed=2"
ARGS ?=
SWEEP ?= table3_a
SEEDS ?=
# make sweep: the sweep's own name when it is not the spec's, e.g. NAME=table3_a_h100 (results/<NAME>/)
NAME ?=
# make sweep's budget: ablation, the one every shipped result in results/ ran with (conf/budget/)
BUDGET ?= ablation
DRY ?=
LAUNCHER ?=
LAMBDAS ?=
STEPS ?=
JOBS ?=
# make sweep: peak learning rates to choose from per cell by seed 1's val loss (e.g. 5e-4,1e-3,2e-3); empty: the config's
LR_GRID ?=
# make sweep: the update check's margin m: a cell whose attention moves in its first steps outside [1/(1+m), 1+m]
# of its base's gets a line; empty: 0.5
UPDATE_MARGIN ?=
RESULTS ?= results
CKPT ?=
SPLIT ?=
BEAM ?=
ALPHA ?=
AVG ?=
RESUME ?=
SWEEPS ?=
# make budget: sweeps holding the same cells at the ablation budget, preferred first (empty: its default list)
AGAINST ?=
# make budgets: the budgets as multiples of BUDGET's steps, each one's share that cools down, the cooldown shape(s)
BUDGETS ?= 1,2,4
COOLDOWN ?= 0.2
SHAPES ?=

# The training targets' allocator: glibc's malloc fragments under variable-length batches (a CPU job's resident
# memory grew to 6-10 GB; docs/notes/2026-11-28-memory.md), jemalloc held it near 2 GB. Preloaded where installed
# (Debian/Ubuntu: apt-get install libjemalloc2); JEMALLOC= turns it off, JEMALLOC=<path> names another build.
JEMALLOC ?= $(firstword $(wildcard /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 /usr/lib/aarch64-linux-gnu/libjemalloc.so.2 /usr/lib64/libjemalloc.so.2))
TRAIN_PY = $(if $(JEMALLOC),LD_PRELOAD=$(JEMALLOC) )$(PY)

# A GPU node without internet: the python that holds its CUDA torch, and the wheel folder headsweep installs from
GPU_PY ?= python3
WHEELS ?= wheels
PYTHON_VERSION ?=
DEV ?=

.PHONY: help setup lint train smoke test test-all bench params evaluate sweep checks table3 table3-report migrate-results results-check report report-check explain lengths budget budgets budgets-report analyze ranks prune clean \
	wheels install-offline gpu-check

help:  ## List the targets
	@# colour only on a terminal, so `make help > file` or a pipe gets plain text
	@if [ -t 1 ]; then on='\033[36m'; off='\033[0m'; fi; \
	awk -v on="$$on" -v off="$$off" 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %s%-10s%s %s\n", on, $$1, off, $$2}' $(MAKEFILE_LIST)

$(SETUP_STAMP): pyproject.toml
	@test -x $(PY) || python3 -m venv .venv
	$(PY) -m pip install -q --upgrade pip
	# torch first, pinned: the local CPU build. Unpinned, pip would pull a multi-GB CUDA build.
	$(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -e ".[dev]"
	# mup, the reference of the per-matrix rates' test: without its torchvision, which would pull another torch
	$(PY) -m pip install -q --no-deps "mup>=1.0"
	@touch $@

setup: $(SETUP_STAMP)  ## Create .venv and install torch (CPU) + headsweep; a no-op when done

train: setup  ## Train the default model on Multi30k de->en (18-23 min on 2 CPU cores) [RESUME=<run dir>]
	$(if $(RESUME),$(TRAIN_PY) -m headsweep.training.resume "$(RESUME)" $(ARGS),$(TRAIN_PY) -m headsweep.train $(ARGS))

smoke: setup  ## The whole path on a slice of the data in about a minute
	$(TRAIN_PY) -m headsweep.train experiment=smoke $(ARGS)

LINT_PATHS := src tests scripts
lint: setup  ## ruff: lint and format check (configured in pyproject.toml; `.venv/bin/ruff format` fixes the format)
	.venv/bin/ruff check $(LINT_PATHS)
	.venv/bin/ruff format --check $(LINT_PATHS)

# pytest-xdist: a worker per core (at most TEST_WORKERS), each with one torch thread (tests/conftest.py); TEST_WORKERS=0
# runs in this process
TEST_WORKERS ?= auto
test: setup  ## The fast tests (what CI runs; under ~10 min on 2 cores) [TEST_WORKERS=auto]
	$(PY) -m pytest -q -n $(TEST_WORKERS) --maxprocesses 4

test-all: setup  ## Every test, the real trainings (marked slow) included: run it before a pull request
	$(PY) -m pytest -q -m "" -n $(TEST_WORKERS) --maxprocesses 4

bench: setup  ## Speed vs baselines timed in the same run: training, attention, decoding [CKPT=run dir]
	$(PY) -m headsweep.bench $(if $(CKPT),--ckpt "$(CKPT)") $(ARGS)

params: setup  ## Parameter counts of every Table 3 row beside the paper's (no data, no training)
	$(PY) -m headsweep.sweeps.params --table3 model=paper_base data.vocab_size=37000 $(ARGS)

evaluate: setup  ## Score a checkpoint: make evaluate CKPT=... [SPLIT=test_2016_flickr BEAM=4 ALPHA=0.6 AVG=5]
	$(PY) -m headsweep.training.evaluate --ckpt "$(CKPT)" $(if $(SPLIT),--split $(SPLIT)) $(if $(BEAM),--beam $(BEAM)) \
		$(if $(ALPHA),--alpha $(ALPHA)) $(if $(AVG),--avg $(AVG)) $(ARGS)

sweep: setup  ## Run an ablation: make sweep SWEEP=table3_a [NAME=.. DRY=1 SEEDS=3 JOBS=2 LAUNCHER=.. ONLY='*-s3' BUDGET=ablation LR_GRID=5e-4,1e-3,2e-3]
	$(TRAIN_PY) -m headsweep.sweeps.sweep --sweep $(SWEEP) $(if $(NAME),--name $(NAME)) $(if $(SEEDS),--seeds $(SEEDS)) $(if $(BUDGET),--budget $(BUDGET)) \
		$(if $(LAUNCHER),--launcher $(LAUNCHER)) $(if $(JOBS),--jobs $(JOBS)) $(if $(ONLY),--only '$(ONLY)') --results $(RESULTS) \
		$(if $(LR_GRID),--lr-grid=$(LR_GRID)) $(if $(UPDATE_MARGIN),--update-margin=$(UPDATE_MARGIN)) $(if $(DRY),--dry) $(ARGS)

.PHONY: wandb-spec
checks: setup  ## Every cell's init check and update check (10 Adam steps at its rate), nothing else trained: make checks SWEEP=table3_b_fan_in [LR_GRID=1e-3,2e-3 UPDATE_MARGIN=0.5]
	$(PY) -m headsweep.sweeps.sweep --sweep $(SWEEP) --checks $(if $(LR_GRID),--lr-grid=$(LR_GRID)) \
		$(if $(UPDATE_MARGIN),--update-margin=$(UPDATE_MARGIN)) $(ARGS)

wandb-spec: setup  ## The full W&B spec of a sweep (base + spec + variant) for `wandb sweep`: make wandb-spec SWEEP=heads_fixed_dk_fp32
	$(PY) -m headsweep.sweeps.specs wandb $(SWEEP) --out outputs/wandb-specs/$(SWEEP).yaml

# make table3: some of Table 3's rows (A-E; empty: all), e.g. ROWS=A,D
ROWS ?=
# make table3-report: the rows' sweeps under a GPU's name, e.g. SUFFIX=_h100 (what make table3 printed there)
SUFFIX ?=

table3: setup  ## Table 3, rows A-E, today's protocol (fan_in, the chosen start, step decay, a rate per cell, 3 seeds), resumable: make table3 [ROWS=A,D DRY=1 JOBS=2 START=unit ONLY='*N4*']
	$(TRAIN_PY) -m headsweep.sweeps.table3 $(if $(ROWS),--rows $(ROWS)) $(if $(START),--start $(START)) $(if $(DRY),--dry) $(if $(JOBS),--jobs $(JOBS)) \
		$(if $(LAUNCHER),--launcher $(LAUNCHER)) $(if $(ONLY),--only '$(ONLY)') --results $(RESULTS) $(ARGS)

table3-report: setup  ## reports/table3.json (every verdict), the page, index and README answers rendered from it [SUFFIX=_h100]
	$(PY) -m headsweep.reports.pages.table3 --root $(RESULTS) $(if $(SUFFIX),--suffix $(SUFFIX)) --readme README.md $(ARGS)

migrate-results: setup  ## Pack the stored runs (hypotheses gzipped, figures small), every number compared before/after
	$(PY) -m headsweep.store.results_check migrate --results $(RESULTS)

results-check: setup  ## Re-score every stored run's hypotheses (plain or .gz) against its stored BLEU/chrF; sizes against the limit
	$(PY) -m headsweep.store.results_check check --results $(RESULTS)

report: setup  ## Write reports/<sweep>.md/.html and reports/index.html from results/: make report SWEEP=table3_a (or all)
	$(PY) -m headsweep.reports.build --sweep $(SWEEP) --root $(RESULTS) --readme README.md $(ARGS)

report-check: setup  ## Open every page of reports/ as a reader does (links, p-values, figure ticks; headless Chromium): make report-check [ARGS=--screenshots docs/img]
	$(PY) -m headsweep.reports.site.check reports $(ARGS)

explain: setup  ## Heads or head width? BLEU vs d_k across sweeps + a fit on log2 h, d_k, d_model: make explain [SWEEPS=a,b]
	$(PY) -m headsweep.reports.pages.explain --root $(RESULTS) $(if $(SWEEPS),--sweeps $(SWEEPS)) $(ARGS)

lengths: setup  ## Narrow heads vs sentence length (low-rank bottleneck?): make lengths [SWEEPS=table3_a,table3_b]
	$(PY) -m headsweep.reports.pages.lengths --root $(RESULTS) $(if $(SWEEPS),--sweeps $(SWEEPS)) $(ARGS)

# make budget's own default sweep; SWEEP=... on the command line still wins
budget: SWEEP = heads_budget_2x
budget: setup  ## 1x vs 2x steps: gap to the base at both budgets, its change, curves: make budget [SWEEP=.. AGAINST=a,b]
	$(PY) -m headsweep.reports.pages.budget --sweep $(SWEEP) $(if $(AGAINST),--against $(AGAINST)) --root $(RESULTS) $(ARGS)

budgets: setup  ## Each cell at several budgets: a WSD trunk per cell and seed, cooldown branches from its checkpoints: make budgets SWEEP=table3_a_fan_in [BUDGETS=1,2,4 COOLDOWN=0.2 SHAPES=sqrt,linear FROM=<sweep> DRY=1 ONLY=.. SEEDS=3 JOBS=2 NAME=..]
	$(TRAIN_PY) -m headsweep.sweeps.budgets --sweep $(SWEEP) --budgets $(BUDGETS) --cooldown $(COOLDOWN) $(if $(SHAPES),--shapes $(SHAPES)) \
		$(if $(NAME),--name $(NAME)) $(if $(SEEDS),--seeds $(SEEDS)) $(if $(BUDGET),--budget $(BUDGET)) $(if $(LAUNCHER),--launcher $(LAUNCHER)) \
		$(if $(JOBS),--jobs $(JOBS)) $(if $(ONLY),--only '$(ONLY)') $(if $(FROM),--from $(FROM)) --results $(RESULTS) $(if $(DRY),--dry) $(ARGS)

budgets-report: setup  ## The budgets page: each cell against the base at every budget, tau, verdicts: make budgets-report [SWEEPS=a_budgets,b_budgets]
	$(PY) -m headsweep.reports.pages.budgets --root $(RESULTS) $(if $(SWEEPS),--sweeps $(SWEEPS)) $(ARGS)

.PHONY: sync
sync: setup  ## Upload a sweep's offline W&B runs with wandb sync: make sync SWEEP=table3_a [DRY=1]
	$(PY) -m headsweep.sweeps.sync --sweep $(SWEEP) $(if $(DRY),--dry)

# make wandb-export / wandb-views: the W&B project the runs go to (empty: headsweep-reference), and its entity
# (empty: WANDB_ENTITY, else the API key's default entity)
PROJECT ?=
ENTITY ?=

.PHONY: wandb-export
wandb-export: setup  ## The shipped runs as offline W&B runs in wandb-export/ (then wandb sync): make wandb-export [SWEEPS=a,b PROJECT=..]
	$(PY) -m headsweep.reports.dashboard.export --root $(RESULTS) --out wandb-export $(if $(SWEEPS),--sweeps $(SWEEPS)) \
		$(if $(PROJECT),--project $(PROJECT)) $(ARGS)

.PHONY: wandb-views
wandb-views: setup  ## A W&B report per question + a workspace view; specs in wandb-export/views/, saved where WANDB_API_KEY is set [PROJECT=.. ENTITY=..]
	$(PY) -m headsweep.reports.dashboard.views --root $(RESULTS) --out wandb-export/views $(if $(PROJECT),--project $(PROJECT)) \
		$(if $(ENTITY),--entity $(ENTITY)) $(ARGS)

analyze: setup  ## Head importance, pruning, roles and attention maps: make analyze CKPT=... [SPLIT=val]
	$(PY) -m headsweep.analysis.analyze --ckpt "$(CKPT)" $(if $(SPLIT),--split $(SPLIT)) $(ARGS)

ranks: setup  ## Attention rank and entropy per head (low-rank bottleneck) of a sweep's finished jobs here, into results/: make ranks SWEEP=long_sequences
	$(PY) -m headsweep.analysis.rank --sweep "$(SWEEP)" $(ARGS)

prune: setup  ## Prune heads while fine-tuning (concrete gates, L0) vs Michel's: make prune CKPT=<run> [LAMBDAS="0 0.01 0.1" STEPS=300]
	$(PY) -m headsweep.analysis.prune --ckpt "$(CKPT)" $(if $(LAMBDAS),--lambdas $(LAMBDAS)) $(if $(STEPS),--steps $(STEPS)) \
		$(if $(SPLIT),--split $(SPLIT)) $(ARGS)

wheels:  ## On a machine with internet: every dependency but torch as wheels for a GPU node [WHEELS=wheels PYTHON_VERSION=3.12]
	python3 scripts/wheels.py download --wheels $(WHEELS) $(if $(PYTHON_VERSION),--python-version $(PYTHON_VERSION)) $(if $(DEV),--dev)

install-offline:  ## On a node with its own CUDA torch, offline: headsweep from WHEELS, torch untouched [GPU_PY=python3 DEV=1]
	$(GPU_PY) scripts/wheels.py install --wheels $(WHEELS) $(if $(DEV),--dev)

gpu-check:  ## On a fresh GPU machine (<10 min, H100): gpu tests, GPU bench, row A x 3 seeds as table3_a_<card>, its report
	GPU_PY=$(GPU_PY) $(if $(JOBS),JOBS=$(JOBS)) bash scripts/gpu_check.sh

clean:  ## Remove run outputs and caches (keeps .venv, and results/ and reports/: tracked reference results)
	rm -rf outputs multirun wandb lightning_logs .cache .pytest_cache .hypothesis
