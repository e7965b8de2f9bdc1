# Developer entry points. Every target works from a fresh checkout (it creates .venv when needed).
PY ?= .venv/bin/python
VENV_STAMP := .venv/.installed

.PHONY: demo test lint bench bench-philly bench-quick bench-engine bench-e2e bench-e2e-kube ci clean

$(VENV_STAMP): pyproject.toml
	python3 -m venv .venv
	.venv/bin/pip install -q --upgrade pip
	.venv/bin/pip install -q -e '.[dev]'
	touch $(VENV_STAMP)

demo: $(VENV_STAMP)          ## run the portal on embedded defaults with demo data
	$(PY) manage.py demo

test: $(VENV_STAMP)          ## the whole test suite (PostgreSQL/Redis tests skip without DATABASE_URL/Redis)
	$(PY) -m pytest

lint: $(VENV_STAMP)
	$(PY) -m ruff check .

bench-engine: $(VENV_STAMP)  ## engine cycle time and memory for 1k-50k pending x 100-5000 nodes
	$(PY) -m benchmarks.engine

bench: $(VENV_STAMP)         ## policy comparison, lab scenario, loads 0.5-1.1, 3 seeds: markdown + PNG plots
	$(PY) -m scheduling.sim report --out reports/sim --scenarios scenarios/lab8.yaml --seeds 3

bench-philly: $(VENV_STAMP)  ## the Philly trace (15k jobs, 256 GPUs), 8 policies x loads 0.5-1.1 x 2 seeds: ~2 h here, resumable
	$(PY) -m scheduling.sim report --out reports/philly --scenarios scenarios/philly.yaml --seeds 2

bench-quick: $(VENV_STAMP)
	$(PY) -m scheduling.sim report --out reports/sim-quick --quick

bench-e2e: $(VENV_STAMP)     ## control-plane throughput through Django + PostgreSQL (needs DATABASE_URL)
	$(PY) -m benchmarks.e2e $(E2E_ARGS)

bench-e2e-kube: $(VENV_STAMP)  ## the same on the Kubernetes backend against KUBECONFIG, beside the bare scheduler
	$(PY) -m benchmarks.e2e --backend kubernetes $(E2E_ARGS)

ci:
	bash .ci/run

clean:
	rm -rf .venv var reports .pytest_cache .ruff_cache
