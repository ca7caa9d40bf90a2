# `make train` and `make test` work on a fresh clone: the first use creates .venv and installs, later uses reuse it.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
ARGS ?=
# pyproject.toml's extras, each one concern's packages; `make install EXTRAS=export,sweeps` takes only those (and the
# core), `EXTRAS=` the core alone. Later targets keep what the last install chose (recorded in $(STAMP)).
ALL_EXTRAS := pretrained,data,export,sweeps,slurm,trackers,hf,ray,dev
STAMP := $(VENV)/.extras
EXTRAS ?= $(if $(wildcard $(STAMP)),$(shell cat $(STAMP)),$(ALL_EXTRAS))
# TORCH=cpu: torch and torchvision from PyTorch's CPU wheel index (no CUDA libraries: about 4 GB less in .venv).
# Without it, PyPI's build, which carries CUDA (`make doctor` says which one is installed and if it fits).
TORCH ?=
TORCH_INDEX := https://download.pytorch.org/whl/$(TORCH)

.PHONY: install lock train test test-fast lint format clean docs

# Exactly the lock's versions (requirements.txt as constraints: only what the chosen extras need is installed)
$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -c requirements.txt pip
	$(if $(TORCH),$(PY) -m pip install -q -c requirements.txt --index-url $(TORCH_INDEX) torch torchvision)
	$(PY) -m pip install -q -c requirements.txt -e ".$(if $(EXTRAS),[$(EXTRAS)])"
	printf '%s' "$(EXTRAS)" > $(STAMP)
# another choice of extras than the last install's reinstalls
ifneq ($(EXTRAS),$(shell cat $(STAMP) 2>/dev/null))
.PHONY: $(STAMP)
endif

install: $(STAMP)  ## create .venv with the lock's versions: EXTRAS=<list> (default: all), TORCH=cpu

# --constraint: the caps pip's own configuration sets (a machine's pinned torch), which pip-compile does not apply
PIP_CONSTRAINTS = $(shell $(PY) -m pip config list 2>/dev/null | sed -n "s/^[^ ]*\.constraint='\(.*\)'$$/\1/p")
lock:  ## recompile requirements.txt from pyproject.toml's ranges, through pip and its configuration
	$(PY) -m piptools compile --quiet --all-extras --strip-extras --allow-unsafe --no-emit-index-url \
	  --no-emit-find-links $(foreach c,$(PIP_CONSTRAINTS),--constraint $(c)) \
	  --output-file requirements.txt pyproject.toml

train: $(STAMP)  ## train the default experiment (digits, CNN); pass overrides with ARGS="model=mlp ..."
	$(PY) scripts/train.py $(ARGS)

# worksteal: an idle worker takes tests queued on the other; with `load` one worker could be left with a queue of
# long integration tests while the other had finished
test: $(STAMP)  ## the whole test suite (the 25 slowest tests are listed at the end: keep the suite in budget)
	$(PY) -m pytest -q -n 2 --dist worksteal --durations=25 $(ARGS)

test-fast: $(STAMP)  ## the in-process tests only, no subprocess (no `integration` marker): a few minutes
	$(PY) -m pytest -q -n 2 --dist worksteal -m "not integration" --durations=10 $(ARGS)

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

format: $(STAMP)
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

# mkdocs.yml: strict, so a broken link, page or anchor fails the build; site/index.html opens from file:// (search too)
docs: $(STAMP)  ## build the documentation site into site/ (README, docs/, each extension's page, the API)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --quiet

clean:  ## run outputs and caches (keeps .venv)
	find outputs -mindepth 1 -not -name .gitkeep -delete
	rm -rf .pytest_cache .ruff_cache .mypy_cache
	find . -name __pycache__ -not -path "./$(VENV)/*" -prune -exec rm -rf {} +

EXTENSIONS := src/lab/extensions
.PHONY: drop
drop:  ## remove an extension you do not need, as `rm -r` of its folder would: make drop EXT=report
	@test -n "$(EXT)" || { echo "usage: make drop EXT=<name>, one of: $$(ls -d $(EXTENSIONS)/*/ | xargs -n1 basename | tr '\n' ' ')" >&2; exit 2; }
	@test -d "$(EXTENSIONS)/$(EXT)" || { echo "error: no extension $(EXT) in $(EXTENSIONS)/: choose one of $$(ls -d $(EXTENSIONS)/*/ | xargs -n1 basename | tr '\n' ' ')" >&2; exit 2; }
	rm -r "$(EXTENSIONS)/$(EXT)"
	@echo "dropped $(EXT): its options, code, presets, tests and page (git status shows it; git checkout brings it back)"

# The environment doctor is an extension's command (`<extension>/doctor.py`, run as a module), found like the rest of
# an extension: without one (dropped), the target says so and fails nothing (CI runs it)
DOCTOR := $(subst /,.,$(patsubst src/%.py,%,$(firstword $(wildcard $(EXTENSIONS)/*/doctor.py))))
.PHONY: doctor
doctor: $(STAMP)  ## check the environment: versions, GPUs (a matmul each), bf16/TF32, disk, wandb mode, packages
	$(if $(DOCTOR),$(PY) -m $(DOCTOR) $(ARGS),@echo "make doctor: no extension here brings the environment doctor \
	($(EXTENSIONS)/<name>/doctor.py; the tools extension was dropped?): nothing to check")

.PHONY: rename
rename:  ## rename the package for your fork: make rename NAME=myproject (needs a clean git tree; reinstalls .venv)
	@test -n "$(NAME)" || { echo "usage: make rename NAME=<new package name>" >&2; exit 2; }
	$(if $(wildcard $(PY)),$(PY),$(PYTHON)) scripts/rename.py "$(NAME)" --python "$(PY)" $(ARGS)

.PHONY: update
update:  ## take the template's later fixes, renamed: make update [REF=v0.2.0] (a clean tree and an `upstream` remote)
	$(if $(wildcard $(PY)),$(PY),$(PYTHON)) scripts/update_template.py --python "$(PY)" \
		$(if $(REF),--ref "$(REF)") $(if $(BASE),--base "$(BASE)") $(ARGS)
