# Two commands do all the set-up on a fresh machine:
#   make demo       run the main job (creates .venv if missing)
#   make test       unit + integration tests and the docstring examples, ~3 min on 2 cores
#   make test-all   everything, the end-to-end tests too (what CI runs), ~17 min on 2 cores
#   make docs       build the docs site into site/ (strict: a broken link or reference fails)
#   make docs-serve serve the docs site at http://127.0.0.1:8000
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test test-unit test-all lint bench docs docs-serve docs-deploy venv clean

$(BIN)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first: the CPU wheel, so no CUDA build is ever downloaded.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[dev,atari,mujoco,video,marl,docs,tune,mlflow,wandb]"
	touch $@

venv: $(BIN)/.installed

demo: venv
	$(BIN)/fleetrl train configs/ppo_cartpole.yaml

# the Ray tests in one process (one Ray instance), and beside them, at a lower priority, the
# unit tests and doctests in two processes, each over half of their files (tests/layers.py)
test: venv
	$(BIN)/python tests/layers.py

test-unit: venv
	$(BIN)/python -m pytest -q -n 2 -m "not e2e" tests/unit src/fleetrl

# as make test, the end-to-end tests too: the slow unit tests (marker e2e) in the unit layer,
# tests/e2e with the Ray tests
test-all: venv
	$(BIN)/python tests/layers.py --all

lint: venv
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

# the site's reference pages are generated from the code at build time (docs/hooks.py)
docs: venv
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# publish the site to the gh-pages branch of origin: GitHub serves it at
# https://<owner>.github.io/<repo>/ (docs/deploy_address.py prints the address it uses)
docs-deploy: venv
	@addr="$$($(BIN)/python docs/deploy_address.py)" || exit 2; eval "$$addr"; \
	export FLEETRL_SITE_URL FLEETRL_REPO_URL; \
	echo "docs-deploy: publishing to $$FLEETRL_SITE_URL (the gh-pages branch of origin)"; \
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs gh-deploy --strict --force

docs-serve: venv
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

bench: venv
	$(BIN)/python benchmarks/collector_throughput.py
	$(BIN)/python benchmarks/ray_throughput.py

clean:
	rm -rf $(VENV) build site *.egg-info src/*.egg-info
