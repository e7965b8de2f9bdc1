# Developer entry points. Every target works from a fresh checkout (it creates .venv when needed).
PY ?= .venv/bin/python
VENV_STAMP := .venv/.installed
# the labs' seeded traces the diagnostics replay (the same 12 as make bench)
BENCH_SEEDS := 1,2,3,4,5,6,7,8,9,10,11,12

.PHONY: arch demo test test-quick lint vendor-js screenshots bench bench-philly bench-traces bench-quick bench-realtime-cost bench-notice bench-idle bench-resizable bench-engine bench-shapes bench-cpu-pools bench-cpu-on-gpu-nodes bench-pages bench-e2e bench-e2e-kube soak-demo ci clean bench-topology bench-teams bench-fractions bench-notebooks bench-bookings bench-tuner

$(VENV_STAMP): pyproject.toml
	python3 -m venv .venv
	.venv/bin/pip install -q --upgrade pip
	.venv/bin/pip install -q -e '.[dev]'
	touch $(VENV_STAMP)

demo: $(VENV_STAMP)          ## run the portal on embedded defaults with demo data
	$(PY) manage.py demo

test: $(VENV_STAMP)          ## the whole test suite, one worker per core (PostgreSQL/Redis tests skip without DATABASE_URL/Redis)
	$(PY) -m pytest -n auto --dist loadfile

# The quick subset: the pure engine's rules (its slow property and search tests left to the whole suite), the
# API's contract (the jobs endpoints and the OpenAPI schema, its fuzz run left out) and one path end to end
# (the walk-through job, submitted to finished, simulated and on the fake Kubernetes API).
QUICK_TESTS := tests/engine/test_placement.py tests/engine/test_policy.py tests/engine/test_rules.py \
	tests/engine/test_evictions.py tests/engine/test_victim_rules.py tests/engine/test_deadlines.py \
	tests/engine/test_retries.py tests/engine/test_namespace_quota.py tests/engine/test_data_sources.py \
	tests/engine/test_clusters.py tests/engine/test_tiers_and_money.py tests/engine/test_csvcells.py \
	tests/engine/test_purity.py tests/scheduling/test_api_jobs.py tests/portal/test_openapi.py \
	tests/workloads/test_walkthrough.py

test-quick: $(VENV_STAMP)    ## the quick subset (about 1 minute, one process): engine rules, API contract, one job end to end
	$(PY) -m pytest -p no:cacheprovider $(QUICK_TESTS)

lint: $(VENV_STAMP)
	$(PY) -m ruff check .

bench-engine: $(VENV_STAMP)  ## engine cycle CPU and wall time (with the load average) and memory for 1k-50k pending x 100-5000 nodes; --cells, --runs, --steady (cycle 2 after cycle 1) via ENGINE_ARGS
	$(PY) -m benchmarks.engine $(ENGINE_ARGS)

bench-teams: $(VENV_STAMP)  ## engine CPU time with every department split into three teams against the same snapshot without teams (the bound: 1.2x); --cells, --runs via TEAMS_ARGS
	$(PY) -m benchmarks.teams $(TEAMS_ARGS)

bench-bookings: $(VENV_STAMP)  ## engine CPU time with four bookings and two maintenance windows against none (the bound: 1.2x); --cells, --runs via BOOKINGS_ARGS
	$(PY) -m benchmarks.bookings $(BOOKINGS_ARGS)

bench-shapes: $(VENV_STAMP)  ## engine CPU time with 20% CPU-only and 10% two-role jobs against the all-GPU mix (the bound: 1.2x); --cells, --runs via SHAPES_ARGS
	$(PY) -m benchmarks.shapes $(SHAPES_ARGS)
bench-topology: $(VENV_STAMP)  ## racks of 4 x 8 GPUs, gangs of 8-32: compact share and gang completion times with topology-aware placement vs ignoring it (3 seeds), and the engine's CPU time with levels vs without (the bound: 1.2x); --seeds, --cells, --part via TOPOLOGY_ARGS
	$(PY) -m benchmarks.topology $(TOPOLOGY_ARGS)

bench-fractions: $(VENV_STAMP)  ## engine CPU time with 30% fractional jobs against today's mix (the bound: 1.2x), and whole GPUs kept free on a fragmented cluster against each fraction on the emptiest GPU; --cells, --runs, --seeds via FRACTIONS_ARGS
	$(PY) -m benchmarks.fractions $(FRACTIONS_ARGS)

bench-notebooks: $(VENV_STAMP)  ## lab1node, training at load 0.6 with a notebook per researcher per weekday: training's and the notebooks' waits without notebooks, with them on whole GPUs and on fractions (5-20 GB of 80), 5 seeds; --seeds, --load, --per-day via NOTEBOOKS_ARGS
	$(PY) -m benchmarks.notebooks --seeds 1 2 3 4 5 $(NOTEBOOKS_ARGS)

bench-cpu-pools: $(VENV_STAMP)  ## GPU-hours and waits of GPU jobs when a third of the jobs are CPU-only: on a CPU pool vs one GPU forced on them; --seeds, --jobs, --load via CPU_POOLS_ARGS
	$(PY) -m benchmarks.cpu_pools $(CPU_POOLS_ARGS)

bench-cpu-on-gpu-nodes: $(VENV_STAMP)  ## engine CPU time with every GPU node lending its spare CPU to the CPU pool against the shapes mix without it; --cells, --runs via CPU_ON_GPU_ARGS
	$(PY) -m benchmarks.cpu_on_gpu_nodes $(CPU_ON_GPU_ARGS)

# The policy comparisons write report.md (with its Targets section), results.json and PNG plots to reports/<name>/
# and are resumable (an interrupted run continues from reports/<name>/replays.jsonl; --fresh starts over).

bench: $(VENV_STAMP)         ## lab8 + lab1node, every policy, loads 0.7/0.9/1.1, 12 seeds (the seed spread is as large as most effects): 5-12 min here, 2 workers on the 2 shared cores
	$(PY) -m simulator report --out reports/bench --scenarios scenarios/lab8.yaml,scenarios/lab1node.yaml \
		--loads 0.7,0.9,1.1 --seeds 12

bench-philly: $(VENV_STAMP)  ## Philly (15k jobs, 256 GPUs), every policy, loads 0.7/0.9/1.1, 1 seed: 0.7 + 1.1 took 70 min here and 0.9 45 min (one worker), so plan on about 2 h
	$(PY) -m simulator report --out reports/philly --scenarios scenarios/philly.yaml --loads 0.7,0.9,1.1 --seeds 1

bench-traces: $(VENV_STAMP)  ## ElasticFlow (15.8k jobs) and Alibaba (6.2k pods), every policy, load 0.9, 1 seed: 4 min measured (one worker)
	$(PY) -m simulator report --out reports/traces --scenarios scenarios/elasticflow.yaml,scenarios/alibaba.yaml \
		--loads 0.9 --seeds 1

bench-realtime-cost: $(VENV_STAMP)  ## lab8 + lab1node at 0.9/1.1, 12 seeds: utilisation with and without the realtime tier, and late realtime starts the cooldown forces
	$(PY) -m benchmarks.realtime_cost --seeds $(BENCH_SEEDS)

bench-notice: $(VENV_STAMP)  ## lab8 + lab1node at 0.9/1.1: GPU-hours lost to preemption without notice, with 300 s of notice answered in half, and unanswered
	$(PY) -m benchmarks.notice --seeds $(BENCH_SEEDS)

bench-resizable: $(VENV_STAMP)  ## lab8 + lab1node at 0.9/1.1, 4 seeds: the portal against Slurm-EASY and FCFS without and with 30% resizable training jobs
	$(PY) -m benchmarks.resizable $(RESIZABLE_ARGS)

bench-tuner: $(VENV_STAMP)   ## a week of lab1node and lab8 history at 0.9/1.1 under a policy that starves realtime: the tuner's proposal, two rounds, and what it recovers
	$(PY) -m benchmarks.tuner $(TUNER_ARGS)

bench-idle: $(VENV_STAMP)    ## lab8 + lab1node at 0.9/1.1, 12 seeds: where the portal's idle GPU-time goes (held for a reservation, no job fits, ...), beside Slurm-EASY's utilisation
	$(PY) -m benchmarks.idle --seeds $(BENCH_SEEDS)

bench-quick: $(VENV_STAMP)
	$(PY) -m simulator report --out reports/sim-quick --quick

bench-pages: $(VENV_STAMP)   ## every list page, API list and the home page: queries and time per role (seed first: manage.py seed_scale; needs DATABASE_URL)
	$(PY) -m benchmarks.pages

bench-e2e: $(VENV_STAMP)     ## control-plane throughput through Django + PostgreSQL (needs DATABASE_URL)
	$(PY) -m benchmarks.e2e $(E2E_ARGS)

bench-e2e-kube: $(VENV_STAMP)  ## the same on the Kubernetes backend against KUBECONFIG, beside the bare scheduler; FAKE_KUBE=1: against the fake API server, started as a process (no cluster)
	$(PY) -m benchmarks.e2e --backend kubernetes $(if $(FAKE_KUBE),--fake-kube,) $(E2E_ARGS)

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
