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

.PHONY: help venv hosted-venv lab kernel test test-hosted test-portable test-stacks test-browser test-slurm gpu-check unit nbval lint execute nav bench handouts clean stress stress-tests

help:
	@echo "make lab      - set up .venv if needed and open JupyterLab on notebooks/ (127.0.0.1, token on)"
	@echo "make kernel   - offer .venv as the Jupyter kernel \"DDP course\" to another Jupyter (a JupyterHub) or VS Code"
	@echo "make test     - lint, unit tests, strict nbval over every notebook, and make test-hosted"
	@echo "make test-hosted - notebooks 00 and 04 under strict nbval in a stand-in hosted runtime: its own venv and torch (HOSTED_TORCH), set up as the README says"
	@echo "make test-portable - strict nbval again under another CPU kernel choice (see PORTABLE_ENV)"
	@echo "make test-stacks - unit tests and make test-portable in .venv-newest: Python 3.13 (PY313), the newest torch from PyPI"
	@echo "make gpu-check - every recorded launch on GPUs (nccl; ranks sharing a GPU over gloo) vs the CPU (gloo); exits 0 without GPUs, 2 on a broken CUDA"
	@echo "                 PLAN=1 GPUS=1: run nothing, print how each launch would run on 1 GPU"
	@echo "make test-slurm - cluster/slurm_ddp.sbatch on a real two-node Slurm on this machine (root; installs slurm-wlm, munge; else skipped)"
	@echo "make test-browser - run notebooks 00 and 02 (and 02's student edition) in JupyterLab in headless Chromium (needs chromium)"
	@echo "make execute  - re-execute every notebook in place (refresh stored outputs); NB=notebooks/03_x.ipynb for one"
	@echo "make nav      - regenerate the previous/next navigation cells"
	@echo "make handouts - offline HTML and A4 PDF handouts (student, instructor), student notebooks, slides, instructor page in build/handouts"
	@echo "make bench    - performance measurements of notebook 10, outside Jupyter"
	@echo "make stress   - repeated launches for failure rates (restarts, plain-script exit aborts, killed callers), not in make test"
	@echo "make stress-tests - the launch-heavy test files ROUNDS times in a row (BUSY=1: cores kept busy), failures per test"
	@echo "make lock     - regenerate requirements-py3.1X.lock from requirements.txt (pip-compile, one lock per Python); UPGRADE=1 for the newest"

# The Pythons make venv installs for, each with its own lock (requirements-py3.X.lock, pip-compile output
# made with that Python): any 3.11, 3.12 or 3.13 release (numpy 2.4 and others need 3.11; each lock is
# made with the oldest release of its Python at hand, e.g. Debian 12's 3.11.2, so that no pin needs a
# later one). pyproject.toml's requires-python says the same. Checked before anything is created or installed.
PYTHONS   := 3.11 3.12 3.13
LOCKS     := $(foreach v,$(PYTHONS),requirements-py$(v).lock)
PY_WANT   := Python 3.11 to 3.13
PY_OK     := 3.11.*|3.12.*|3.13.*
PY_ADVICE := install one, or pass PY=/path/to/python3.11 (or 3.12, 3.13), or use conda env create -f environment.yml
# $(call need_python,INTERPRETER,ADVICE): a shell command that fails with a message unless INTERPRETER is $(PY_WANT).
need_python = v=$$($(1) -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null); \
	case "$$v" in $(PY_OK)) ;; *) echo "make needs $(PY_WANT), found $${v:-no working Python} at $(1): $(2)" >&2; exit 1;; esac
# $(call python_ok,VENV): check VENV's own Python if VENV exists, else $(PY), which will create it.
python_ok = if test -x $(1)/bin/python; then $(call need_python,$(1)/bin/python,remove $(1) and run make again with PY=/path/to/python3.11 (or 3.12, 3.13)); \
	else $(call need_python,$(PY),$(PY_ADVICE)); fi
# pip without this machine's pip configuration (local indexes, find-links, constraints such as a cap
# on torch): what a learner's pip gets from PyPI. make test-stacks installs .venv-newest so.
PYPI_ONLY := PIP_CONFIG_FILE=/dev/null PIP_FIND_LINKS= PIP_CONSTRAINT=
PIP_ENV   ?=

# Reinstall only when the pins, a lock or the package metadata change. requirements.txt says what is
# installed, the lock of the venv's Python (a constraints file) the version of every package that pulls
# in. tools/stack.py writes the two files pip gets: requirements.txt and that lock, or, where the venv
# already holds a torch in the supported range (2.13.0 to 2.15.x, a CUDA build included), both with that
# torch in place of their torch pins, and the lock without its CUDA packages (that torch brought its own).
$(STAMP): requirements.txt $(LOCKS) pyproject.toml tools/stack.py
	@$(call python_ok,$(VENV))
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python tools/stack.py write $(VENV)
	$(PIP_ENV) $(BIN)/python -m pip install -q -r $(VENV)/stack-requirements.txt -c $(VENV)/stack-constraints.txt
	$(PIP_ENV) $(BIN)/python -m pip install -q --no-deps --no-build-isolation -e .
	touch $(STAMP)

# The locks from requirements.txt: pip-tools' pip-compile, in a tool venv under build/ per Python, each
# made with its own Python: PY311, PY312, PY313 (python3.1X on PATH or pyenv's, the first that runs; make
# them with the oldest release of each supported, e.g. PY311=/usr/bin/python3.11 on Debian 12, whose
# 3.11.2 is: pip-compile then picks only versions that install there). pip-compile resolves with pip, so
# it sees the torch wheels that make venv sees. It keeps a lock's pins where they still fit; UPGRADE=1
# takes the newest. torch's local suffix (+cpu) is dropped so that another build of the same version
# satisfies the lock too, and so are the markers of requirements.txt (a lock serves one Python).
# 3.11, the reference stack: resolved with this machine's pip configuration and the CPU wheel of torch,
# so its lock pins no CUDA package; where pip sees no CPU wheel, it resolves PyPI's CUDA build and make
# lock stops: add LOCK_ARGS='--extra-index-url https://download.pytorch.org/whl/cpu'.
# 3.12 and 3.13: resolved from PyPI alone ($(PYPI_ONLY)), as a learner's pip gets torch there: on Linux
# x86_64 a CUDA build, whose CUDA packages (nvidia-*, cuda-*, triton) these locks pin too.
first_python = $(firstword $(foreach p,$(2) python$(1) $(sort $(wildcard $(HOME)/.pyenv/versions/$(1).*/bin/python$(1))),\
	$(if $(shell $(p) -c 'import venv' 2>/dev/null && echo ok),$(p))) python$(1))
PY311 ?= $(call first_python,3.11,/usr/bin/python3.11)
PY312 ?= $(call first_python,3.12)
PY313 ?= $(call first_python,3.13)
LOCK_ENV_3.11 :=
LOCK_ENV_3.12 := $(PYPI_ONLY)
LOCK_ENV_3.13 := $(PYPI_ONLY)
.PHONY: lock $(addprefix lock-py,$(PYTHONS))
lock: $(addprefix lock-py,$(PYTHONS))
$(addprefix lock-py,$(PYTHONS)): lock-py%:
	@$(call need_python,$(PY$(subst .,,$*)),pass PY$(subst .,,$*)=/path/to/python$*)
	@$(PY$(subst .,,$*)) -c 'import sys; assert "%d.%d" % sys.version_info[:2] == "$*", "PY$(subst .,,$*) is not Python $*"'
	test -x build/pip-tools-py$*/bin/pip-compile || { $(PY$(subst .,,$*)) -m venv build/pip-tools-py$* && \
	  $(LOCK_ENV_$*) build/pip-tools-py$*/bin/pip install -q pip-tools==7.6.2; }
	cp requirements-py$*.lock build/requirements-py$*.lock 2>/dev/null || cp requirements-py3.11.lock build/requirements-py$*.lock
	$(LOCK_ENV_$*) CUSTOM_COMPILE_COMMAND="make lock" build/pip-tools-py$*/bin/pip-compile -q --allow-unsafe --strip-extras \
	  --no-emit-index-url --no-emit-find-links --no-emit-trusted-host $(if $(UPGRADE),--upgrade) $(LOCK_ARGS) \
	  -o build/requirements-py$*.lock requirements.txt
	@test $* != 3.11 || ! grep -Eq '^(nvidia-|cuda-|triton==)' build/requirements-py$*.lock || { echo "make lock: \
	pip-compile resolved the CUDA build of torch (nvidia-* pins in build/requirements-py$*.lock); make the CPU wheel \
	visible with LOCK_ARGS='--extra-index-url https://download.pytorch.org/whl/cpu'" >&2; exit 1; }
	{ printf '%s\n' \
	  '# Every package that make venv installs on Python $*, at one version. Generated: do not edit. Change' \
	  '# requirements.txt (the direct pins), then run make lock (pip-compile of pip-tools, one lock per' \
	  '# Python; make lock UPGRADE=1 for the newest versions). make venv and environment.yml install' \
	  '# -r requirements.txt -c requirements-py$*.lock.' \
	  $(if $(filter 3.11,$*),$(LOCK_NOTE_CPU),$(LOCK_NOTE_PYPI)); \
	  sed -E -e 's/^([^#[:space:]]+==[^[:space:]]+) ?;.*$$/\1/' -e 's/^(torch==[^+[:space:]]+)\+[^[:space:]]+$$/\1/' \
	    build/requirements-py$*.lock; } > requirements-py$*.lock
LOCK_NOTE_CPU := \
	  '\# torch: pip-compile resolved the CPU wheel (+cpu); make lock drops the +cpu, so the pin accepts' \
	  '\# the CPU build and a CUDA build (from PyPI, or +cuXXX from PyTorch) alike. The CUDA packages such a' \
	  '\# build adds (nvidia-*, cuda-*, triton) are not pinned here: that torch wheel pins them.'
LOCK_NOTE_PYPI := \
	  '\# torch: pip-compile resolved the wheel on PyPI, without the pip configuration of the machine, as a' \
	  '\# learner gets it: on Linux x86_64 a CUDA build, whose CUDA packages (nvidia-*, cuda-*, triton) are' \
	  '\# pinned here too. A constraints file installs nothing by itself: on macOS, or with the CPU build' \
	  '\# from the PyTorch index (+cpu, which satisfies the pin: make lock drops local suffixes), those pins' \
	  '\# are never used. make venv keeps a torch already installed in the supported range, and then leaves' \
	  '\# them out with the torch pin (tools/stack.py).'

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

# A JupyterHub's or VS Code's own Jupyter lists kernels from the user's data folder: this one runs
# .venv's Python (JUPYTER_DATA_DIR=... puts it elsewhere; `jupyter kernelspec remove ddp-course` undoes it).
kernel: $(STAMP)
	$(BIN)/python -m ipykernel install --user --name ddp-course --display-name "DDP course (.venv)"

test: $(STAMP) lint unit nbval test-hosted

# --durations: the slowest tests close the log (where CI time goes). UNIT_JOBS=2 runs the unit tests two files at a time (a file's tests stay in order in one worker:
# test_launch.py's orphan check sees only its own launches). Not the default: it saved nothing on 2 cores.
UNIT_JOBS ?= 0
unit: $(STAMP)
	$(CPU_ENV) $(BIN)/python -m pytest -q $(if $(filter-out 0,$(UNIT_JOBS)),-n $(UNIT_JOBS) --dist loadfile) \
	  tests --ignore=tests/browser --ignore=tests/slurm --durations=25

# A learner's session in headless Chromium (Debian's chromium package; .ci/run installs it).
test-browser: $(STAMP) $(LAB_SETTINGS)
	$(CPU_ENV) $(BIN)/python -m pytest -q --durations=10 tests/browser

# A real Slurm: two slurmd "nodes" in network namespaces of this machine, slurmctld, munged
# (tools/slurm_cluster.py), all removed afterwards. The unchanged batch script runs CPU workers on
# them; the two-node job's output is recorded in cluster/recorded/two_node_run.txt (notebook 09 shows
# it). Needs root (it installs slurm-wlm and munge with apt-get if missing); elsewhere it says
# "skipped" and exits 0. Not part of make unit.
test-slurm: $(STAMP)
	$(CPU_ENV) $(BIN)/python -m pytest -q -rs tests/slurm

nbval: $(STAMP)
	$(NB_ENV) $(BIN)/python -m pytest -q --durations=15 $(NBVAL_PAR) $(NBVAL) $(NOTEBOOKS)
	@# the worker scripts the notebooks just wrote (git-ignored, so named explicitly)
	$(BIN)/ruff check --no-respect-gitignore --ignore I001 notebooks/scripts

test-portable: $(STAMP)
	$(NB_ENV) $(PORTABLE_ENV) $(BIN)/python -m pytest -q $(NBVAL_PAR) $(NBVAL) $(NOTEBOOKS)

# A hosted runtime (Colab, Kaggle, a JupyterHub image) stands in: a venv of its own that already holds
# another supported torch (HOSTED_TORCH, the build pip takes by default: on Linux PyPI's CUDA build, as
# Colab's), Jupyter's kernel and nbval; then the README's install step ("Colab, Kaggle and other hosted
# runtimes"); then strict nbval of notebooks 00 and 04 in that venv's kernel, from this clone. The install
# (about 5 GB) is made once per HOSTED_TORCH, like make venv; the test itself downloads nothing.
# Other packages are held at the lock's versions (tools/stack.py keeps the installed torch), so the
# stand-in changes only torch. Part of make test.
HOSTED_TORCH ?= 2.14.1
HOSTED       := build/hosted-torch$(HOSTED_TORCH)
HOSTED_NOTEBOOKS := notebooks/00_orientation.ipynb notebooks/04_ddp_fundamentals.ipynb
# The runtime as it comes (independent of .venv: .ci/run installs both at once with make -j2), then the
# README's step, after .venv's install (both editable installs write ddp_helpers.egg-info here).
$(HOSTED)/.runtime: $(LOCKS) tools/stack.py
	@$(call need_python,$(PY),$(PY_ADVICE))
	rm -rf $(HOSTED) && $(PY) -m venv $(HOSTED)
	$(PIP_ENV) $(HOSTED)/bin/python -m pip install -q torch==$(HOSTED_TORCH)
	$(HOSTED)/bin/python tools/stack.py write $(HOSTED)
	$(PIP_ENV) $(HOSTED)/bin/python -m pip install -q ipykernel nbval pytest pytest-timeout -c $(HOSTED)/stack-constraints.txt
	touch $@
$(HOSTED)/.installed: $(HOSTED)/.runtime requirements-hosted.txt pyproject.toml | $(STAMP)
	@# the README's step, as a notebook's %pip runs it (the constraints only hold the lock's versions)
	$(PIP_ENV) $(HOSTED)/bin/python -m pip install -q -e . -r requirements-hosted.txt -c $(HOSTED)/stack-constraints.txt
	$(HOSTED)/bin/python -c 'import sys, torch; v = torch.__version__.split("+")[0]; \
	  sys.exit(None if v == "$(HOSTED_TORCH)" else "the install step replaced the runtime torch $(HOSTED_TORCH) by " + v)'
	touch $@
hosted-venv: $(HOSTED)/.installed

test-hosted: $(HOSTED)/.installed
	$(NB_ENV) $(HOSTED)/bin/python -m pytest -q --durations=5 $(NBVAL) $(HOSTED_NOTEBOOKS)

# The newest stack: make unit and make test-portable again in a second venv (made if missing) of
# Python 3.13 (PY313) with requirements-py3.13.lock's torch, the newest, installed as a learner's pip
# gets it from PyPI ($(PYPI_ONLY): this machine's indexes and caps left out). Not in make test.
NEWEST_VENV := .venv-newest
test-stacks:
	$(MAKE) unit test-portable VENV=$(NEWEST_VENV) PY=$(PY313) PIP_ENV='$(PYPI_ONLY)'

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
# ONLY=11_dcp runs the save before the load); REFERENCE=1 runs the CPU side twice (checks the tool without GPUs);
# PLAN=1 runs nothing and prints how each launch would run, for GPUS=N GPUs (default: those visible).
gpu-check: $(STAMP)
	$(BIN)/python tools/gpu_check.py $(if $(ONLY),--only '$(ONLY)') $(if $(REFERENCE),--reference-only) \
	  $(if $(PLAN),--plan) $(if $(GPUS),--gpus $(GPUS))

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
