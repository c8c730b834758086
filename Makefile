# Entry points of the DDP notebook series. `make help` lists them.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
# Notebooks run without live widgets when executed headless (nbval, nbconvert);
# matplotlib keeps the kernel's inline backend so figures are stored as PNGs.
# The notebook list, the nbval options and their environment are written once, in ddp_helpers/series.py
# (standard library only, so any python3 answers before the venv exists: $(PY), else python3). CPU_ENV is the CPU path on
# every machine: GPUs hidden (torch sees none, in the kernel and in every worker) and gloo forced (the
# runtime's DDP_BACKEND switch), so a GPU box runs and stores what a laptop does; the GPU path is
# `make gpu-check`. NB_ENV adds what strict nbval needs (launch summaries only, fixed hashing).
SERIES    = $(shell { $(PY) ddp_helpers/series.py $(1) || python3 ddp_helpers/series.py $(1); } 2>/dev/null)
CPU_ENV   := $(call SERIES,cpu-env)
NB_ENV    := $(call SERIES,nbval-env)
NBVAL     := $(call SERIES,nbval-args)
NOTEBOOKS := $(call SERIES,notebooks)
ifeq ($(and $(CPU_ENV),$(NB_ENV),$(NBVAL),$(NOTEBOOKS)),)
$(error ddp_helpers/series.py did not answer (tried PY=$(PY) and python3): run make from the repository root, with python3 on PATH)
endif
# NBVAL_JOBS=2 runs two notebooks at a time (pytest-xdist; --dist loadfile keeps a notebook's cells in
# order, in one kernel). Not the default: on 2 busy cores one such run failed two cells, so make test
# runs the notebooks one at a time until that is understood.
NBVAL_JOBS ?= 0
NBVAL_PAR := $(if $(filter-out 0,$(NBVAL_JOBS)),-n $(NBVAL_JOBS) --dist loadfile)
# Another machine's kernels: ATen without vector code, MKL and oneDNN at SSE4 level, random
# string hashing. The stored outputs must still match (notebooks/README.md, "Every machine").
PORTABLE_ENV := ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2 ONEDNN_MAX_CPU_ISA=SSE41 PYTHONHASHSEED=random

.PHONY: help venv lab test test-portable test-browser test-slurm gpu-check unit nbval lint execute nav bench handouts clean stress stress-tests

help:
	@echo "make lab      - set up .venv if needed and open JupyterLab on notebooks/ (127.0.0.1, token on)"
	@echo "make test     - unit tests, lint and strict nbval over every notebook"
	@echo "make test-portable - strict nbval again under another CPU kernel choice (see PORTABLE_ENV)"
	@echo "make gpu-check - every recorded launch at its recorded size on GPUs (nccl) vs the CPU (gloo); exits 0 without GPUs"
	@echo "make test-slurm - cluster/slurm_ddp.sbatch on a real two-node Slurm on this machine (root; installs slurm-wlm, munge; else skipped)"
	@echo "make test-browser - run notebooks 00 and 02 (and 02's student edition) in JupyterLab in headless Chromium (needs chromium)"
	@echo "make execute  - re-execute every notebook in place (refresh stored outputs); NB=notebooks/03_x.ipynb for one"
	@echo "make nav      - regenerate the previous/next navigation cells"
	@echo "make handouts - offline HTML and A4 PDF handouts (student, instructor), student notebooks, slides, instructor page in build/handouts"
	@echo "make bench    - performance measurements of notebook 10, outside Jupyter"
	@echo "make stress   - repeated launches for failure rates (restarts, plain-script exit aborts, killed callers), not in make test"
	@echo "make stress-tests - the launch-heavy test files ROUNDS times in a row (BUSY=1: cores kept busy), failures per test"
	@echo "make lock     - regenerate requirements.lock from requirements.txt (pip-compile); UPGRADE=1 for the newest versions"

# The Python that requirements.lock is made and tested for: any 3.11 release (numpy 2.4 and others
# need 3.11; the lock is made with the oldest release tested, Debian 12's 3.11.2, so that no pin needs
# a later one). Checked before anything is created or installed.
PY_WANT   := Python 3.11
PY_OK     := 3.11.*
PY_ADVICE := install it, or pass PY=/path/to/python3.11, or use conda env create -f environment.yml
# $(call need_python,INTERPRETER,ADVICE): a shell command that fails with a message unless INTERPRETER is $(PY_WANT).
need_python = v=$$($(1) -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null); \
	case "$$v" in $(PY_OK)) ;; *) echo "make needs $(PY_WANT), found $${v:-no working Python} at $(1): $(2)" >&2; exit 1;; esac
# $(call python_ok,VENV): check VENV's own Python if VENV exists, else $(PY), which will create it.
python_ok = if test -x $(1)/bin/python; then $(call need_python,$(1)/bin/python,remove $(1) and run make again with PY=/path/to/python3.11); \
	else $(call need_python,$(PY),$(PY_ADVICE)); fi

# Reinstall only when the pins, the lock or the package metadata change. requirements.txt says what
# is installed, requirements.lock (a constraints file) the version of every package that pulls in.
$(STAMP): requirements.txt requirements.lock pyproject.toml
	@$(call python_ok,$(VENV))
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q -r requirements.txt -c requirements.lock
	$(BIN)/python -m pip install -q --no-deps --no-build-isolation -e .
	touch $(STAMP)

# requirements.lock from requirements.txt: pip-tools' pip-compile, in a tool venv under build/ made with
# $(PY) (make it with the oldest 3.11 release supported: make lock PY=/usr/bin/python3.11 on Debian 12,
# whose 3.11.2 is; pip-compile then picks only versions that install there), resolves with pip (so it sees the same torch wheels as make venv). It keeps the lock's pins
# where they still fit; UPGRADE=1 takes the newest. torch's local suffix (+cpu) is dropped so that a
# CUDA build of the same version satisfies the lock too. Where pip sees no CPU wheel of torch, it
# resolves PyPI's CUDA build and make lock stops: add LOCK_ARGS='--extra-index-url <PyTorch's CPU index>'.
PIP_TOOLS := build/pip-tools
.PHONY: lock
lock:
	@$(call python_ok,$(PIP_TOOLS))
	test -x $(PIP_TOOLS)/bin/pip-compile || { $(PY) -m venv $(PIP_TOOLS) && $(PIP_TOOLS)/bin/pip install -q pip-tools==7.6.2; }
	cp requirements.lock build/requirements.lock 2>/dev/null || true
	CUSTOM_COMPILE_COMMAND="make lock" $(PIP_TOOLS)/bin/pip-compile -q --allow-unsafe --strip-extras \
	  --no-emit-index-url --no-emit-find-links --no-emit-trusted-host $(if $(UPGRADE),--upgrade) $(LOCK_ARGS) \
	  -o build/requirements.lock requirements.txt
	@! grep -Eq '^(nvidia-|cuda-|triton==)' build/requirements.lock || { echo "make lock: pip-compile \
	resolved the CUDA build of torch (nvidia-* pins in build/requirements.lock); make the CPU wheel visible with \
	LOCK_ARGS='--extra-index-url https://download.pytorch.org/whl/cpu'" >&2; exit 1; }
	{ printf '%s\n' \
	  '# Every package that make venv installs, at one version. Generated: do not edit. Change' \
	  '# requirements.txt (the direct pins), then run make lock (pip-compile of pip-tools, Python 3.11;' \
	  '# make lock UPGRADE=1 for the newest versions). make venv and environment.yml install' \
	  '# -r requirements.txt -c requirements.lock.' \
	  '# torch: pip-compile resolved the CPU wheel (2.13.0+cpu); make lock drops the +cpu, so the pin' \
	  '# accepts the CPU build and a CUDA build (PyPI 2.13.0, or 2.13.0+cuXXX from PyTorch) alike. The' \
	  '# CUDA packages such a build adds (nvidia-*, cuda-*, triton) are not pinned here: torch pins them.'; \
	  sed -E 's/^(torch==[^+[:space:]]+)\+[^[:space:]]+$$/\1/' build/requirements.lock; } > requirements.lock

venv: $(STAMP)

# Jupyter refuses to run as root unless told; containers often are root.
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)
# JupyterLab's settings overrides: no "get notified about Jupyter news" pop-up, no update check
# (both would ask a website; workshops are often offline).
LAB_SETTINGS := $(VENV)/share/jupyter/lab/settings/overrides.json
$(LAB_SETTINGS): tools/jupyterlab-overrides.json $(STAMP)
	mkdir -p $(dir $@) && cp $< $@

lab: $(STAMP) $(LAB_SETTINGS)
	cd notebooks && ../$(BIN)/jupyter lab --ServerApp.ip=127.0.0.1 --no-browser $(ROOT_FLAG)

test: $(STAMP) lint unit nbval

# UNIT_JOBS=2 runs the unit tests two files at a time (a file's tests stay in order in one worker:
# test_launch.py's orphan check sees only its own launches). Not the default: it saved nothing on 2 cores.
UNIT_JOBS ?= 0
unit: $(STAMP)
	$(CPU_ENV) $(BIN)/python -m pytest -q $(if $(filter-out 0,$(UNIT_JOBS)),-n $(UNIT_JOBS) --dist loadfile) \
	  tests --ignore=tests/browser --ignore=tests/slurm

# A learner's session in headless Chromium (Debian's chromium package; .ci/run installs it).
test-browser: $(STAMP) $(LAB_SETTINGS)
	$(CPU_ENV) $(BIN)/python -m pytest -q tests/browser

# A real Slurm: two slurmd "nodes" in network namespaces of this machine, slurmctld, munged
# (tools/slurm_cluster.py), all removed afterwards. The unchanged batch script runs CPU workers on
# them; the two-node job's output is recorded in cluster/recorded/two_node_run.txt (notebook 09 shows
# it). Needs root (it installs slurm-wlm and munge with apt-get if missing); elsewhere it says
# "skipped" and exits 0. Not part of make unit.
test-slurm: $(STAMP)
	$(CPU_ENV) $(BIN)/python -m pytest -q -rs tests/slurm

nbval: $(STAMP)
	$(NB_ENV) $(BIN)/python -m pytest -q $(NBVAL_PAR) $(NBVAL) $(NOTEBOOKS)
	@# the worker scripts the notebooks just wrote (git-ignored, so named explicitly)
	$(BIN)/ruff check --no-respect-gitignore --ignore I001 notebooks/scripts

test-portable: $(STAMP)
	$(NB_ENV) $(PORTABLE_ENV) $(BIN)/python -m pytest -q $(NBVAL_PAR) $(NBVAL) $(NOTEBOOKS)

# Repetitions for rates, kept out of make test (which runs each once): the plain-script restart
# STRESS_REPEATS times, STRESS_LAUNCHES launches of the walkthrough's DDP scripts counting exit aborts, and
# STRESS_KILLS launches whose caller is SIGKILLed, counting those that leave a process (tools/kill_stress.py).
STRESS_REPEATS ?= 10
STRESS_LAUNCHES ?= 200
STRESS_KILLS ?= 200
stress: $(STAMP)
	$(CPU_ENV) STRESS_REPEATS=$(STRESS_REPEATS) $(BIN)/python -m pytest -q -m restarts tests/test_launch.py
	$(CPU_ENV) $(BIN)/python tools/teardown_stress.py --launches $(STRESS_LAUNCHES)
	$(CPU_ENV) $(BIN)/python tools/kill_stress.py --kills $(STRESS_KILLS)

# A test that fails now and then is a bug: the launch-heavy test files ROUNDS times in a row, failures
# counted per test (tools/stress_tests.py; TESTS= other files or pytest options, BUSY=1 loads every core).
ROUNDS ?= 30
stress-tests: $(STAMP)
	$(CPU_ENV) $(BIN)/python tools/stress_tests.py --rounds $(ROUNDS) $(if $(BUSY),--busy) $(TESTS)

# ONLY=regex limits it to some scripts, e.g. make gpu-check ONLY=04_ (keep a launch's predecessors:
# ONLY=11_dcp runs the save before the load); REFERENCE=1 runs the CPU side twice (checks the tool without GPUs).
gpu-check: $(STAMP)
	$(BIN)/python tools/gpu_check.py $(if $(ONLY),--only '$(ONLY)') $(if $(REFERENCE),--reference-only)

lint: $(STAMP)
	$(BIN)/ruff check ddp_helpers tests tools notebooks templates

NB ?= $(NOTEBOOKS)
execute: $(STAMP)
	@mkdir -p build
	record=$$(mktemp -p $(CURDIR)/build launches.XXXXXX.jsonl); \
	for nb in $(NB); do \
	  $(NB_ENV) DDP_HELPERS_RECORD=$$record $(BIN)/jupyter nbconvert --to notebook --execute --inplace \
	    --ExecutePreprocessor.timeout=600 "$$nb" || exit 1; \
	  $(BIN)/python tools/scrub_tracebacks.py "$$nb" || exit 1; \
	done; \
	$(BIN)/python tools/gpu_check.py --collect $$record

# Offline handouts (HTML, A4 PDFs printed by Debian's chromium, reveal.js slides, instructor page);
# the first run installs the pinned browser libraries (package-lock.json) into build/npm with npm ci.
handouts: $(STAMP)
	$(BIN)/python tools/handouts.py --slides --pdf

# SUITE=1 also times strict nbval over every notebook (slow).
bench: $(STAMP)
	$(BIN)/python -m ddp_helpers.perf --json build/bench.json $(if $(SUITE),--suite)

nav: $(STAMP)
	$(BIN)/python tools/nav.py

clean:
	rm -rf build notebooks/runs .pytest_cache
	find notebooks/scripts -type f ! -name .gitignore -delete
