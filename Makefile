# `make train` and `make test` work on a fresh clone: the first use creates .venv and installs, later uses reuse it.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
ARGS ?=

.PHONY: install train test test-fast lint format clean

$(STAMP): requirements.txt requirements-dev.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt -e .
	touch $(STAMP)

install: $(STAMP)  ## create .venv and install the project with its dev tools

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

format: $(STAMP)
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

clean:  ## run outputs and caches (keeps .venv)
	find outputs -mindepth 1 -not -name .gitkeep -delete
	rm -rf .pytest_cache .ruff_cache
	find . -name __pycache__ -not -path "./$(VENV)/*" -prune -exec rm -rf {} +

.PHONY: doctor
doctor: $(STAMP)  ## check the environment: versions, GPUs (a matmul each), bf16/TF32, disk, wandb mode, packages
	$(PY) scripts/doctor.py $(ARGS)

.PHONY: rename
rename:  ## rename the package for your fork: make rename NAME=myproject (needs a clean git tree; reinstalls .venv)
	@test -n "$(NAME)" || { echo "usage: make rename NAME=<new package name>" >&2; exit 2; }
	$(if $(wildcard $(PY)),$(PY),$(PYTHON)) scripts/rename.py "$(NAME)" --python "$(PY)" $(ARGS)

.PHONY: update
update:  ## take the template's later fixes, renamed: make update [REF=v0.2.0] (a clean tree and an `upstream` remote)
	$(if $(wildcard $(PY)),$(PY),$(PYTHON)) scripts/update_template.py --python "$(PY)" \
		$(if $(REF),--ref "$(REF)") $(if $(BASE),--base "$(BASE)") $(ARGS)
