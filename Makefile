# gpudoctor: `make test` and `make demo` work from a fresh clone (they set up .venv).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build of torch; users of the package bring their own (CUDA) build.
TORCH_DEV ?= torch==2.13.0

.PHONY: test demo dev lint typecheck bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH_DEV)"
	@# the integrations' requirements must keep the torch that is there (never pull another build)
	$(PY) -c "import torch; print('torch==' + torch.__version__)" > $(VENV)/constraints.txt
	$(PY) -m pip install -q -e '.[test,integrations]' -c $(VENV)/constraints.txt
	touch $@

dev: $(VENV)/.installed

test: $(VENV)/.installed
	$(PY) -m pytest -q -p no:cacheprovider

demo: $(VENV)/.installed
	$(VENV)/bin/gpudoctor demo

lint: $(VENV)/.installed
	$(PY) -m pip install -q ruff
	$(VENV)/bin/ruff check gpudoctor tests

typecheck: $(VENV)/.installed
	$(PY) -m pip install -q mypy
	$(VENV)/bin/mypy gpudoctor

bench: $(VENV)/.installed
	$(PY) benchmarks/overhead.py

clean:
	rm -rf $(VENV) build *.egg-info gpudoctor-reports
