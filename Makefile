# The README's commands. `make demo` and `make test` do all the set-up they need.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
STEPS  ?= 200
BENCH_ARGS ?=

.PHONY: setup web browser docker demo up test bench gpu-wheels clean

setup: $(STAMP)

# torch is installed first and pinned, so no later step can resolve another (CUDA) build.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev,kernels]'
	touch $(STAMP)

# The dashboard, built when missing (the monitor serves web/dist); the build writes web/src/api/types.ts
# from the monitor's schema first (graphql-codegen, web/codegen.yml).
web: web/dist/index.html
web/dist/index.html: $(wildcard web/package.json web/package-lock.json web/codegen.yml web/src/* web/src/*/* web/index.html services/monitor/schema.graphql)
	@if [ -f web/package.json ]; then cd web && npm ci --no-audit --no-fund && npm run build; fi

# Debian's Chromium for the end-to-end dashboard tests.
browser:
	@command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null; }

# `docker compose up`'s image (tools/docker_engine.py): installs Debian's docker.io, docker-compose and
# debootstrap when missing, starts dockerd when no engine answers, makes the base image once, builds.
docker: setup web
	$(PY) tools/docker_engine.py

# 8 micro-batches (of one sequence each): the allocator's estimate then takes a stage on each of the
# 3 PNodes and the pipeline overlaps; with one micro-batch it would train on one and keep two standing
# by (`python -m bench.demo_placement` measures each PNode's share of a step spent waiting)
DEMO_TRAINING := --micro-batches 8

demo: setup web
	$(VENV)/bin/computeall up --pnodes 3 --train examples/networks/tiny-gpt.yaml --steps $(STEPS) $(DEMO_TRAINING) \
		--validate-every 25 --sample-every 50 --sample-prompt 'def ' --sample-prompt 'class '

up: setup web
	$(VENV)/bin/computeall up --pnodes 3

# the image is built in the background while the other tests run; the compose test runs last and waits
# for it; a machine that cannot run an engine (not root) is told why, and that test skips there
test: setup web browser
	$(PY) tools/docker_engine.py --optional --in-background
	$(PY) -m pytest -q -n 3 --dist loadgroup --durations=15

# every benchmark, one table, docs/benchmarks.md; `make bench BENCH_ARGS=--quick` for a short run
bench: setup web browser
	$(PY) -m bench.run_all $(BENCH_ARGS)

# the wheels bench/gpu_check.sh installs on a GPU machine without a network
gpu-wheels: setup
	bench/gpu_wheels.sh

clean:
	rm -rf .computeall bench/results/*.json
