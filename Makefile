# Two commands: `make book` and `make test`. Each creates .venv if absent and installs what it needs.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
JB_FLAGS := -W -n --keep-going --all   # --all: re-execute every page (Sphinx would skip unchanged sources)

.PHONY: book test pytest book-ci gpu-results gpu-tests check-results html-check clean venv

# Python writes its bytecode caches, whatever the caller's PYTHONDONTWRITEBYTECODE says: the install skips compiling
# every installed module (--no-compile: ≈ 80 s of a 2-core machine's install), so each module is compiled once, by the
# first process that imports it, and read from its cache by every later one (without the caches every process would
# compile torch's modules again: ≈ 19 s to import it instead of ≈ 8).
unexport PYTHONDONTWRITEBYTECODE

venv: $(STAMP)
$(STAMP): requirements.txt pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --no-compile -r requirements.txt
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	@touch $(STAMP)

## make book: execute every chapter at the best scale this machine has (full with CUDA, ci without) -> _build/html
book: $(STAMP)
	rm -rf _build/html _build/jupyter_execute
	$(BIN)/jupyter-book build . $(JB_FLAGS)
	@echo "book: $$(pwd)/_build/html/index.html"

## make test: pytest (CPU: Triton interpreter) + the strict book build at ci scale + the headless-browser check.
## Two busy lanes side by side, so that the 2-core CI machine keeps both cores working: pytest, and beside it the book
## build, then the HTML check of the built book, then the test files of LATE_TESTS in their own pytest (on a 2-core
## machine the book takes ≈ 7.5 of pytest's ≈ 12.5 minutes, the check ≈ 1, these files ≈ 4). Each runs torch on one thread
## (OMP_NUM_THREADS=1): torch's default two threads wait on each other whenever the other core is busy (a tiny forward
## and backward measured 60× slower in such spells), and the tiny ci-scale operations gain nothing from a second
## thread. The second lane's logs are printed once pytest is done; the target fails if any part failed (the HTML
## check does not run on a failed book). Without Chromium the browser tests and the HTML check are skipped (said so,
## with the install command), unless HTML_CHECK=required (CI), where a missing Chromium is an error.
CI_ENV := TRITON_INTERPRET=1 BOOK_SCALE=ci OMP_NUM_THREADS=1
BOOK_CI := rm -rf _build/html _build/jupyter_execute && $(CI_ENV) $(BIN)/jupyter-book build . $(JB_FLAGS)
LATE_TESTS := tests/test_round_block.py tests/test_loop_certificate.py tests/test_row_pv.py tests/test_kernel_registers.py
# the late pytest keeps its temporary folders and no cache of its own, apart from the main run's
LATE_PYTEST := $(CI_ENV) $(BIN)/python -m pytest -q -p no:cacheprovider --basetemp=_build/pytest-late $(LATE_TESTS)
MAIN_PYTEST := $(CI_ENV) $(BIN)/python -m pytest -q tests $(addprefix --ignore=,$(LATE_TESTS))
LANE := book-ci html-check pytest-late
test: $(STAMP)
	@mkdir -p _build && rm -f $(foreach x,$(LANE),_build/$(x).log _build/$(x).rc)
	@echo "beside pytest: the book build, its HTML check, then $(LATE_TESTS) (their logs, in _build/, follow pytest's)"
	@( $(BOOK_CI) > _build/book-ci.log 2>&1; echo $$? > _build/book-ci.rc; \
	   if [ "$$(cat _build/book-ci.rc)" = 0 ]; then \
	     $(MAKE) -s html-check HTML_CHECK=$(or $(HTML_CHECK),optional) > _build/html-check.log 2>&1; \
	     echo $$? > _build/html-check.rc; \
	   else echo "not run: the book build failed" > _build/html-check.log; echo 1 > _build/html-check.rc; fi; \
	   $(LATE_PYTEST) > _build/pytest-late.log 2>&1; echo $$? > _build/pytest-late.rc ) & \
	$(MAIN_PYTEST); t=$$?; wait; ok=$$((t == 0)); \
	for x in $(LANE); do r=$$(cat _build/$$x.rc); echo "======== $$x (exit status $$r) ========"; \
	  cat _build/$$x.log; [ "$$r" = 0 ] || ok=0; done; \
	echo "pytest: exit status $$t; $(foreach x,$(LANE),$(x): exit status $$(cat _build/$(x).rc);)"; \
	[ $$ok = 1 ]

book-ci: $(STAMP)
	$(BOOK_CI)

## make html-check: headless Chromium at a 1280-px window over _build/html (pages, math, images, links, widths of
## tables and equations, collapsed tables expanded, figure text sizes, repeated images, raw pipe tables, all-bold
## paragraphs, internal names in prose). Needs Debian's chromium + chromium-driver; CHROMIUM / CHROMEDRIVER override
## the PATH search (CHROMIUM= simulates a machine without it). Missing: an error, or a skip under HTML_CHECK=optional.
CHROMIUM_INSTALL := sudo apt-get install -y chromium chromium-driver
CHROMIUM ?= $(shell command -v chromium || command -v chromium-browser)
CHROMEDRIVER ?= $(shell command -v chromedriver)
html-check: $(STAMP)
	@if [ -n "$(CHROMIUM)" ] && [ -n "$(CHROMEDRIVER)" ]; then \
	  echo "$(BIN)/python -m lib.book.htmlcheck _build/html"; \
	  $(BIN)/python -m lib.book.htmlcheck _build/html; \
	elif [ "$(HTML_CHECK)" = optional ]; then \
	  echo "html-check: SKIPPED: headless Chromium and its driver are not installed. Enable the check with:"; \
	  echo "    $(CHROMIUM_INSTALL)"; \
	else \
	  echo "html-check: FAILED: headless Chromium and its driver are not installed$(if $(HTML_CHECK), (HTML_CHECK=$(HTML_CHECK)))."; \
	  echo "Install them with:"; \
	  echo "    $(CHROMIUM_INSTALL)"; \
	  exit 1; \
	fi

## GPU path (plain Python; the GPU image has no Jupyter). Writes results under $${OUT:-results}/full.
gpu-results:
	$(PY) -m lib.experiments all --scale full --out $${OUT:-results}

## make gpu-tests: the tests marked gpu (not slow) as concurrent pytest processes, one or more per GPU
## (tests/gpu/run_sharded.py); GPUS=0 takes every visible GPU, JOBS=0 picks the process count from GPUs and CPUs.
## Log: $${OUT:-results}/full/gpu_tests.log (+ one per shard, + measured seconds per test).
## The shards are dealt by the seconds each test took in the last full run on one H100 (GPU_COSTS), not by the
## script's estimates, which missed the two longest tests by up to 6×.
GPUS ?= 0
JOBS ?= 0
GPU_COSTS ?= tests/gpu/durations_h100.json
gpu-tests:
	$(PY) tests/gpu/run_sharded.py --gpus $(GPUS) --jobs $(JOBS) --costs $(GPU_COSTS) --log $${OUT:-results}/full/gpu_tests.log

check-results: $(STAMP)
	$(BIN)/python -m lib.book.results check

clean:
	rm -rf _build .pytest_cache
