# The README's commands. `make demo` and `make test` do all the set-up they need.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
STEPS  ?= 200
BENCH_ARGS ?=

.PHONY: setup web browser demo up test bench clean

setup: $(STAMP)

# torch is installed first and pinned, so no later step can resolve another (CUDA) build.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev,kernels]'
	touch $(STAMP)

# The dashboard, built when missing (the monitor serves web/dist).
web: web/dist/index.html
web/dist/index.html: $(wildcard web/package.json web/package-lock.json web/src/* web/src/*/* web/index.html)
	@if [ -f web/package.json ]; then cd web && npm ci --no-audit --no-fund && npm run build; fi

# Debian's Chromium for the end-to-end dashboard tests.
browser:
	@command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null; }

# 8 micro-batches (of one sequence each): the allocator's estimate then takes a stage on each of the
# 3 PNodes and the pipeline overlaps; with one micro-batch it would train on one and keep two standing
# by (bench/demo_placement.py measures each PNode's share of a step spent waiting)
DEMO_TRAINING := --micro-batches 8

demo: setup web
	$(VENV)/bin/computeall up --pnodes 3 --train examples/networks/tiny-gpt.yaml --steps $(STEPS) $(DEMO_TRAINING) \
		--validate-every 25 --sample-every 50 --sample-prompt 'def ' --sample-prompt 'class '

up: setup web
	$(VENV)/bin/computeall up --pnodes 3

test: setup web browser
	$(PY) -m pytest -q

# `make bench BENCH_ARGS=--quick` for a short run
bench: setup web browser
	$(PY) bench/run_all.py $(BENCH_ARGS)

clean:
	rm -rf .computeall bench/results/*.json
