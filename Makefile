# MLPerf-style benchmark harness. `make demo` and `make test` each set themselves up.
SHELL   := /bin/bash
.SHELLFLAGS := -eo pipefail -c
# this machine's pip config names local index folders that may not exist: drop that noise only
QUIET_PIP := 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
VENV    ?= .venv
PY      := $(VENV)/bin/python
# torch build: the CPU wheel on disk here; on GPU clusters e.g. TORCH="torch==2.13.0 --index-url ..."
TORCH   ?= torch==2.13.0
SWEEP   ?= harness/sweeps/demo.yaml
SITE    ?= local
TRACKING_PORT ?= 5000
# TRACKING_HOST=0.0.0.0 serves the compute nodes (loopback by default)
TRACKING_HOST ?= 127.0.0.1
ADDRESS ?= 127.0.0.1
PORT    ?= 8501
STAMP   := $(VENV)/.setup-done

.PHONY: setup demo sweep rerun-failed run list system-deps test test-all ingest rebuild-store portal perf gpu-check clean \
        submit rerun-failed-slurm slurm-up slurm-down tracking-server tracking-server-down postgres-up postgres-down ttt check-logs weak parallel comm

setup: $(STAMP)
$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q $(TORCH) $(QUIET_PIP)
	$(VENV)/bin/pip install -q -e ".[dev]" $(QUIET_PIP)
	touch $@

demo: setup             ## the main job: a small CPU ablation, recorded, summarised
	$(PY) -m harness demo

sweep: setup            ## make sweep SWEEP=path/to/sweep.yaml
	$(PY) -m harness sweep $(SWEEP)

parallel: setup         ## parallel strategies (ddp, zero1, fsdp, tp, tp+sp, dp x tp, pipelines) under mpiexec [SWEEP_PARALLEL=... e.g. harness/sweeps/parallel-cpu-moe.yaml]
	$(PY) -m harness sweep $(or $(SWEEP_PARALLEL),harness/sweeps/parallel-cpu.yaml)

comm: setup             ## make comm RANKS=4 [COMM_ARGS="-e 64M --dtypes float32,bfloat16"]: collectives benchmark (gloo, MPI) under mpiexec
	$(VENV)/bin/mpiexec -n $(or $(RANKS),2) $(PY) -m harness comm $(COMM_ARGS)

rerun-failed: setup     ## rerun only the failed/killed/missing cells of the latest SWEEP run
	$(PY) -m harness sweep $(SWEEP) --rerun-failed

list: setup
	$(PY) -m harness list

system-deps:            ## Debian packages the tests use: chromium for the portal's real-browser check
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; } || \
	  echo "warning: chromium not installed (needs root): the browser check will be skipped"

ttt: setup               ## make ttt WORKLOAD=cosmoflow RUNS=5 [SIZE=tiny]: time-to-train, olympic score
	$(PY) -m harness ttt $(or $(WORKLOAD),cosmoflow) --size $(or $(SIZE),tiny) --runs $(or $(RUNS),5)

check-logs: setup        ## the unmodified MLPerf compliance checker on every time-to-train log
	$(PY) -m harness check-logs

weak: setup              ## make weak WORKLOAD=cosmoflow INSTANCES=2: concurrent instances via mpiexec
	$(VENV)/bin/mpiexec -n $(or $(INSTANCES),2) $(PY) -m harness weak $(or $(WORKLOAD),cosmoflow) --size $(or $(SIZE),tiny)

slurm-up: setup          ## a real single-node Slurm on loopback (root; apt-installs slurm + munge once)
	$(PY) -m harness.launch.local_slurm up

slurm-down:              ## stop the daemons slurm-up started
	$(PY) -m harness.launch.local_slurm down

submit: setup            ## make submit SWEEP=... [SITE=local|path.yaml] [DRY_RUN=1] [WAIT=1]
	$(PY) -m harness submit $(SWEEP) --site $(SITE) $(if $(DRY_RUN),--dry-run) $(if $(WAIT),--wait)

rerun-failed-slurm: setup  ## resubmit only the failed/killed cells of the latest SWEEP submission
	$(PY) -m harness submit $(SWEEP) --site $(SITE) --rerun-failed $(if $(WAIT),--wait)

tracking-server: setup   ## a shared MLflow server for many writers [BACKEND=postgres: on a real PostgreSQL; default sqlite]
	$(PY) -m results.store.server --host $(TRACKING_HOST) --port $(TRACKING_PORT) $(if $(BACKEND),--backend $(BACKEND))

tracking-server-down:    ## stop the PostgreSQL `tracking-server BACKEND=postgres` started (the server itself: Ctrl-C)
	$(PY) -m results.store.postgres down

postgres-up: setup       ## the harness's own PostgreSQL (root; apt-installs postgresql once), for the store's tests
	@$(PY) -m results.store.postgres up || echo "warning: no PostgreSQL (needs root): its store tests will be skipped"

postgres-down:           ## stop it
	$(PY) -m results.store.postgres down

test: setup system-deps slurm-up postgres-up  ## what CI runs: every test not marked slow (keeps CI under 30 min)
	$(PY) -m pytest -q -m "not slow" --durations=15

test-all: setup system-deps slurm-up postgres-up  ## every test, the slow multi-rank and learning cases too
	$(PY) -m pytest -q --durations=25

ingest: setup           ## records not yet in MLflow (e.g. the store was unreachable)
	$(PY) -m results ingest

rebuild-store: setup    ## a damaged sqlite store set aside and rebuilt from the records (FORCE=1: a healthy one too)
	$(PY) -m results rebuild-store $(if $(FORCE),--force)

portal: setup           ## ADDRESS=0.0.0.0 to listen beyond localhost
	$(PY) -m streamlit run portal/app.py --server.address $(ADDRESS) --server.port $(PORT) \
	  --server.headless true --browser.gatherUsageStats false

gpu-check: setup        ## on a GPU machine: CUDA Graphs, DALI GPU, NCCL, compile, amp
	$(PY) -m harness.experiments.gpu_check

perf: setup             ## benchmarks (not tests): figures to results/perf/perf.json
	$(PY) -m harness.bench

clean:                  ## records, store, datasets (not the venv)
	rm -rf results/runs results/comm results/plans results/profiles results/mlflow.db results/mlartifacts results/perf data test-artifacts
