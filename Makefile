# The README's commands. `make demo` and `make test` do all the set-up they need.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
STEPS  ?= 200

.PHONY: setup demo up test bench clean

setup: $(STAMP)

# torch is installed first and pinned, so no later step can resolve another (CUDA) build.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev,kernels]'
	touch $(STAMP)

demo: setup
	$(VENV)/bin/computeall up --pnodes 3 --train examples/networks/tiny-gpt.yaml --steps $(STEPS)

up: setup
	$(VENV)/bin/computeall up --pnodes 3

test: setup
	$(PY) -m pytest -q

bench: setup
	$(PY) bench/run_all.py

clean:
	rm -rf .computeall bench/results/*.json
