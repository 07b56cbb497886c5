# Two commands: `make book` and `make test`. Each creates .venv if absent and installs what it needs.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
JB_FLAGS := -W -n --keep-going --all   # --all: re-execute every page (Sphinx would skip unchanged sources)

.PHONY: book test pytest book-ci gpu-results gpu-tests check-results html-check clean venv

venv: $(STAMP)
$(STAMP): requirements.txt pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q -r requirements.txt
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	@touch $(STAMP)

## make book: execute every chapter at the best scale this machine has (full with CUDA, ci without) -> _build/html
book: $(STAMP)
	rm -rf _build/html _build/jupyter_execute
	$(BIN)/jupyter-book build . $(JB_FLAGS)
	@echo "book: $$(pwd)/_build/html/index.html"

## make test: pytest (CPU: Triton interpreter) + the strict book build at ci scale + the headless-browser check.
## Two busy processes side by side, so that the 2-core CI machine keeps both cores working: pytest, and beside it
## the book build followed by the test files of LATE_TESTS (their own pytest, once the book is built: the book takes
## ≈ 8 of pytest's ≈ 15 minutes there, and these files ≈ 3 more). Each runs torch on one thread (OMP_NUM_THREADS=1):
## torch's default two threads wait on each other whenever the other core is busy (a tiny forward and backward
## measured 60× slower in such spells), and the tiny ci-scale operations gain nothing from a second thread. The
## book's and the late tests' logs are printed once pytest is done; the target fails if any of the three failed.
## Without Chromium the browser tests and the HTML check are skipped (said so, with the install command), unless
## HTML_CHECK=required (CI), where a missing Chromium is an error.
CI_ENV := TRITON_INTERPRET=1 BOOK_SCALE=ci OMP_NUM_THREADS=1
BOOK_CI := rm -rf _build/html _build/jupyter_execute && $(CI_ENV) $(BIN)/jupyter-book build . $(JB_FLAGS)
LATE_TESTS := tests/test_round_block.py tests/test_loop_certificate.py
# the late pytest keeps its temporary folders and no cache of its own, apart from the main run's
LATE_PYTEST := $(CI_ENV) $(BIN)/python -m pytest -q -p no:cacheprovider --basetemp=_build/pytest-late $(LATE_TESTS)
test: $(STAMP)
	@mkdir -p _build && rm -f _build/book-ci.log _build/book-ci.rc _build/pytest-late.log _build/pytest-late.rc
	@echo "book-ci, then $(LATE_TESTS): beside pytest (their logs, in _build/, follow pytest's)"
	@( $(BOOK_CI) > _build/book-ci.log 2>&1; echo $$? > _build/book-ci.rc; \
	   $(LATE_PYTEST) > _build/pytest-late.log 2>&1; echo $$? > _build/pytest-late.rc ) & \
	$(CI_ENV) $(BIN)/python -m pytest -q tests $(addprefix --ignore=,$(LATE_TESTS)); t=$$?; wait; \
	b=$$(cat _build/book-ci.rc); l=$$(cat _build/pytest-late.rc); \
	echo "======== book-ci (exit status $$b) ========"; cat _build/book-ci.log; \
	echo "======== pytest $(LATE_TESTS) (exit status $$l) ========"; cat _build/pytest-late.log; \
	echo "pytest: exit status $$t; book-ci: exit status $$b; late tests: exit status $$l"; \
	[ $$t -eq 0 ] && [ $$b -eq 0 ] && [ $$l -eq 0 ]
	$(MAKE) html-check HTML_CHECK=$(or $(HTML_CHECK),optional)

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
