# Developer entry points. Every target works from a fresh checkout (it creates .venv when needed).
PY ?= .venv/bin/python
VENV_STAMP := .venv/.installed
# the labs' seeded traces the diagnostics replay (the same 12 as make bench)
BENCH_SEEDS := 1,2,3,4,5,6,7,8,9,10,11,12

.PHONY: arch demo test lint vendor-js screenshots bench bench-philly bench-traces bench-quick bench-realtime-cost bench-idle bench-engine bench-pages bench-e2e bench-e2e-kube soak-demo ci clean

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

bench-engine: $(VENV_STAMP)  ## engine cycle CPU and wall time (with the load average) and memory for 1k-50k pending x 100-5000 nodes; --cells, --runs via ENGINE_ARGS
	$(PY) -m benchmarks.engine $(ENGINE_ARGS)

# The policy comparisons write report.md (with its Targets section), results.json and PNG plots to reports/<name>/
# and are resumable (an interrupted run continues from reports/<name>/replays.jsonl; --fresh starts over).

bench: $(VENV_STAMP)         ## lab8 + lab1node, every policy, loads 0.7/0.9/1.1, 12 seeds (the seed spread is as large as most effects): 5-12 min here, 2 workers on the 2 shared cores
	$(PY) -m scheduling.sim report --out reports/bench --scenarios scenarios/lab8.yaml,scenarios/lab1node.yaml \
		--loads 0.7,0.9,1.1 --seeds 12

bench-philly: $(VENV_STAMP)  ## Philly (15k jobs, 256 GPUs), every policy, loads 0.7/0.9/1.1, 1 seed: 0.7 + 1.1 took 70 min here and 0.9 45 min (one worker), so plan on about 2 h
	$(PY) -m scheduling.sim report --out reports/philly --scenarios scenarios/philly.yaml --loads 0.7,0.9,1.1 --seeds 1

bench-traces: $(VENV_STAMP)  ## ElasticFlow (15.8k jobs) and Alibaba (6.2k pods), every policy, load 0.9, 1 seed: 4 min measured (one worker)
	$(PY) -m scheduling.sim report --out reports/traces --scenarios scenarios/elasticflow.yaml,scenarios/alibaba.yaml \
		--loads 0.9 --seeds 1

bench-realtime-cost: $(VENV_STAMP)  ## lab8 + lab1node at 0.9/1.1, 12 seeds: utilisation with and without the realtime tier, and late realtime starts the cooldown forces
	$(PY) -m benchmarks.realtime_cost --seeds $(BENCH_SEEDS)

bench-idle: $(VENV_STAMP)    ## lab8 + lab1node at 0.9/1.1, 12 seeds: where the portal's idle GPU-time goes (held for a reservation, no job fits, ...), beside Slurm-EASY's utilisation
	$(PY) -m benchmarks.idle --seeds $(BENCH_SEEDS)

bench-quick: $(VENV_STAMP)
	$(PY) -m scheduling.sim report --out reports/sim-quick --quick

bench-pages: $(VENV_STAMP)   ## every list page, API list and the home page: queries and time per role (seed first: manage.py seed_scale; needs DATABASE_URL)
	$(PY) -m benchmarks.pages

bench-e2e: $(VENV_STAMP)     ## control-plane throughput through Django + PostgreSQL (needs DATABASE_URL)
	$(PY) -m benchmarks.e2e $(E2E_ARGS)

bench-e2e-kube: $(VENV_STAMP)  ## the same on the Kubernetes backend against KUBECONFIG, beside the bare scheduler
	$(PY) -m benchmarks.e2e --backend kubernetes $(E2E_ARGS)

SOAK_MINUTES ?= 60
SOAK_LOAD_CORES ?= 2
soak-demo: $(VENV_STAMP)     ## manage.py demo under steady REST submissions for SOAK_MINUTES (60) with SOAK_LOAD_CORES (2) busy loops: worker deaths and unfinished jobs must be 0
	$(PY) -m benchmarks.soak_demo --minutes $(SOAK_MINUTES) --load-cores $(SOAK_LOAD_CORES) $(SOAK_ARGS)

screenshots: $(VENV_STAMP)   ## refresh docs/screenshots/: the demo runs 90 s, then each main page per role in Chromium
	$(PY) tools/screenshots.py

CHARTJS_VERSION ?= 4.6.1
vendor-js:                   ## refresh the vendored Chart.js from the npm registry (the portal serves it; no CDN)
	rm -rf var/npm && mkdir -p var/npm
	cd var/npm && npm pack --silent chart.js@$(CHARTJS_VERSION) && tar xzf chart.js-$(CHARTJS_VERSION).tgz
	cp var/npm/package/dist/chart.umd.min.js var/npm/package/LICENSE.md portal/static/portal/vendor/chartjs/

ci:
	bash .ci/run

clean:
	rm -rf .venv var reports .pytest_cache .ruff_cache

arch: $(VENV_STAMP)          ## largest modules, imports hidden inside functions, import circles between first-party modules
	$(PY) -m benchmarks.architecture
