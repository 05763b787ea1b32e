# gpudoctor: `make test` and `make demo` work from a fresh clone (they set up .venv).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build of torch; users of the package bring their own (CUDA) build.
TORCH_DEV ?= torch==2.13.0

.PHONY: test test-fast test-integration demo dev lint typecheck bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH_DEV)"
	@# the integrations' requirements must keep the torch that is there (never pull another build)
	$(PY) -c "import torch; print('torch==' + torch.__version__)" > $(VENV)/constraints.txt
	$(PY) -m pip install -q -e '.[test,integrations]' -c $(VENV)/constraints.txt
	touch $@

# ruff and mypy at the versions pyproject.toml's `lint` extra pins
$(VENV)/.lint-installed: $(VENV)/.installed pyproject.toml
	$(PY) -m pip install -q -e '.[lint]' -c $(VENV)/constraints.txt
	touch $@

dev: $(VENV)/.installed

# pytest-xdist workers: one per core, at most 4 (each imports torch)
JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ $$n -gt 4 ] && n=4; echo $$n)
PYTEST := $(PY) -m pytest -q -p no:cacheprovider -n $(JOBS)

# everything: the fast unit tests and the integration tests (CI runs this)
test: $(VENV)/.installed
	$(PYTEST)

# in-process unit tests only, under a minute on 2 cores (the fuzz search runs 15 examples, not 60)
test-fast: $(VENV)/.installed
	GD_FUZZ_EXAMPLES=$${GD_FUZZ_EXAMPLES:-15} $(PYTEST) -m "not integration"

# the tests that start processes: the CLI, real workloads, DataLoader workers, pip builds
test-integration: $(VENV)/.installed
	$(PYTEST) -m integration

demo: $(VENV)/.installed
	$(VENV)/bin/gpudoctor demo

# ruff (with the complexity limit, C901), then the layer contract: tests/test_layers.py reads
# every import with ast and fails an upward one (docs/architecture.md, "Layer rules")
lint: $(VENV)/.lint-installed
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q -p no:cacheprovider tests/test_layers.py

typecheck: $(VENV)/.lint-installed
	$(VENV)/bin/mypy gpudoctor

bench: $(VENV)/.installed
	$(PY) benchmarks/overhead.py --out gpudoctor-reports/overhead

clean:
	rm -rf $(VENV) build *.egg-info gpudoctor-reports
