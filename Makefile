# Entry points of the DDP notebook series. `make help` lists them.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
# Notebooks run without live widgets when executed headless (nbval, nbconvert);
# matplotlib keeps the kernel's inline backend so figures are stored as PNGs.
NB_ENV  := DDP_HELPERS_LIVE=quiet PYTHONHASHSEED=0
NBVAL   := --nbval --nbval-current-env --nbval-sanitize-with notebooks/sanitize.cfg --nbval-cell-timeout=300
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9][0-9]_*.ipynb))
# Another machine's kernels: ATen without vector code, MKL and oneDNN at SSE4 level, random
# string hashing. The stored outputs must still match (notebooks/README.md, "Every machine").
PORTABLE_ENV := ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2 ONEDNN_MAX_CPU_ISA=SSE41 PYTHONHASHSEED=random

.PHONY: help venv lab test test-portable test-browser gpu-check unit nbval lint execute nav bench handouts clean

help:
	@echo "make lab      - set up .venv if needed and open JupyterLab on notebooks/ (127.0.0.1, token on)"
	@echo "make test     - unit tests, lint and strict nbval over every notebook"
	@echo "make test-portable - strict nbval again under another CPU kernel choice (see PORTABLE_ENV)"
	@echo "make gpu-check - every worker script on GPUs (nccl) vs the CPU (gloo); exits 0 without GPUs"
	@echo "make test-browser - run notebooks 00 and 02 (and 02's student edition) in JupyterLab in headless Chromium (needs chromium)"
	@echo "make execute  - re-execute every notebook in place (refresh stored outputs); NB=notebooks/03_x.ipynb for one"
	@echo "make nav      - regenerate the previous/next navigation cells"
	@echo "make handouts - offline HTML and A4 PDF handouts (student, instructor), student notebooks, slides, instructor page in build/handouts"
	@echo "make bench    - performance measurements of notebook 10, outside Jupyter"

# Reinstall only when the pins or the package metadata change.
$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q -r requirements.txt
	$(BIN)/python -m pip install -q --no-deps --no-build-isolation -e .
	touch $(STAMP)

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

unit: $(STAMP)
	$(BIN)/python -m pytest -q tests --ignore=tests/browser

# A learner's session in headless Chromium (Debian's chromium package; .ci/run installs it).
test-browser: $(STAMP) $(LAB_SETTINGS)
	$(BIN)/python -m pytest -q tests/browser

nbval: $(STAMP)
	$(NB_ENV) $(BIN)/python -m pytest -q $(NBVAL) $(NOTEBOOKS)
	@# the worker scripts the notebooks just wrote (git-ignored, so named explicitly)
	$(BIN)/ruff check --no-respect-gitignore --ignore I001 notebooks/scripts

test-portable: $(STAMP)
	$(PORTABLE_ENV) DDP_HELPERS_LIVE=quiet $(BIN)/python -m pytest -q $(NBVAL) $(NOTEBOOKS)

# ONLY=regex limits it to some scripts, e.g. make gpu-check ONLY=04_
gpu-check: $(STAMP)
	$(BIN)/python tools/gpu_check.py $(if $(ONLY),--only '$(ONLY)')

lint: $(STAMP)
	$(BIN)/ruff check ddp_helpers tests tools notebooks

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
	$(BIN)/python -m ddp_helpers.bench --json build/bench.json $(if $(SUITE),--suite)

nav: $(STAMP)
	$(BIN)/python tools/nav.py

clean:
	rm -rf build notebooks/runs .pytest_cache
	find notebooks/scripts -type f ! -name .gitignore -delete
