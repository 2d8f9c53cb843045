# fedloge_nb: two commands do everything on a fresh machine (Python 3.11, root, package registries only).
#   make run   - set up (idempotent), then the main job
#   make test  - set up (idempotent), then nbdev_test over nbs/ and pytest over tests/
#   make docs  - the chapters as a static site in _site/ (open _site/index.html)
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.fedloge_nb-installed
FMNIST := /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
OUT ?= runs/main

.PHONY: setup data test test-nbs test-py slow run export clean-nbs bench docs docs-deps wheel-env

setup: $(STAMP) data

# the package (ranges in settings.ini) with its extras in ONE resolve, pinned to the versions tested here (constraints.txt)
$(STAMP): settings.ini setup.py constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -c constraints.txt -e ".[dev,tensorboard]"
	@touch $(STAMP)

# Fashion-MNIST comes from Debian (offline); installed only when missing and apt is available
data:
	@if [ ! -f $(FMNIST) ]; then \
	  if command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian package dataset-fashion-mnist"; \
	    SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	    $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq dataset-fashion-mnist >/dev/null; \
	  else echo "warning: $(FMNIST) missing and no apt-get: Fashion-MNIST notebooks will fail (see data/README.md)"; fi; \
	fi

# headless Chromium for tests/test_docs.py (the site's images, links and equations); installed only when missing and apt is available
docs-deps:
	@if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1 && ! command -v google-chrome >/dev/null 2>&1; then \
	  if command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian package chromium"; \
	    SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	    $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; \
	  else echo "warning: chromium missing and no apt-get: tests/test_docs.py will fail (install Chromium)"; fi; \
	fi

# the environment tests/test_wheel.py installs the built wheel into (constraints.txt, no source tree): made once per
# constraints.txt and Python version in ~/.cache/fedloge_nb (minutes: torch and Flower downloaded), part of the set-up;
# the test itself builds this tree's wheel and installs it there (seconds)
wheel-env: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python tests/test_wheel.py

test: setup docs-deps wheel-env test-nbs test-py

test-nbs:
	cd nbs && OMP_NUM_THREADS=1 ../$(BIN)/nbdev_test --n_workers 2 --timing

# two pytest workers (pytest-xdist), a test file per unit of work, the longest files first (conftest.py's order, which
# xdist keeps only with --no-loadscope-reorder), one torch thread each (two threads per worker on two cores made the
# in-process tests up to 10x slower); exit code 5 (no tests collected) is a failure here, not a pass
test-py:
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=10 tests; rc=$$?; if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; exit 1; fi; exit $$rc

# long experiments hidden behind the `slow` flag
slow: setup
	cd nbs && ../$(BIN)/nbdev_test --flags slow --n_workers 1 --timing

run: setup
	$(BIN)/fedloge_nb main --out $(OUT)

export:
	$(BIN)/nbdev_export && $(BIN)/nbdev_clean && $(BIN)/python scripts/make_readme.py

bench: setup
	$(BIN)/python scripts/bench_sse_c.py

# the chapters as a static site: _site/index.html (nbconvert, stored outputs; no Quarto needed)
docs: $(STAMP)
	$(BIN)/python scripts/build_docs.py --out _site
