# fedloge_nb: two commands do everything on a fresh machine (Python 3.11, root, package registries only).
#   make run   - set up (idempotent), then the main job
#   make test  - set up (idempotent), then nbdev_test over nbs/ and pytest over tests/
#   make docs  - the chapters as a static site in _site/ (open _site/index.html)
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
UV := $(BIN)/uv
STAMP := $(VENV)/.fedloge_nb-installed
FMNIST := /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
OUT ?= runs/main

.PHONY: setup test-setup data docs-deps debs test test-nbs test-py slow run export clean-nbs bench docs wheel-env

# the virtual environment and the Debian packages side by side (two jobs: uv mostly waits on the network and the disk
# while apt runs, and the other way round)
setup:
	@$(MAKE) --no-print-directory -j2 $(STAMP) data

# `make test`'s set-up: the same, with Chromium, then the wheel test's environment (seconds: uv's cache is filled by then)
test-setup:
	@$(MAKE) --no-print-directory -j2 $(STAMP) debs
	@$(MAKE) --no-print-directory wheel-env

# the package (ranges in settings.ini) with its extras in ONE resolve, pinned to the versions tested here (constraints.txt).
# uv installs (the version pinned in constraints.txt, put in by pip): each wheel is downloaded once into uv's cache
# (~/.cache/uv, or $UV_CACHE_DIR) and hard-linked from there into .venv and into the wheel test's environment, where pip
# would unpack torch and Flower's 6 GB twice. uv does not see a local wheel store that pip is configured with (it
# downloads), and it compiles the modules to bytecode only when asked: --compile-bytecode, as pip does by default.
$(STAMP): settings.ini setup.py constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@test -x $(UV) || $(BIN)/python -m pip install -q --disable-pip-version-check -c constraints.txt uv
	$(UV) pip install -q --python $(BIN)/python --compile-bytecode -c constraints.txt -e ".[dev,tensorboard]"
	@touch $(STAMP)

# Debian packages, each installed only when it is missing and apt is available, all of them in one apt-get run:
# Fashion-MNIST (offline data) and headless Chromium (tests/test_docs.py opens the site in it)
NO_FMNIST = $(if $(wildcard $(FMNIST)),,dataset-fashion-mnist)
NO_CHROMIUM = $(if $(shell command -v chromium chromium-browser google-chrome 2>/dev/null),,chromium)
define apt_install
if [ -n "$(strip $(1))" ]; then \
  if command -v apt-get >/dev/null 2>&1; then \
    echo "installing Debian packages: $(strip $(1))"; \
    SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
    $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $(1) >/dev/null; \
  else echo "warning: no apt-get to install $(strip $(1)): $(2)"; fi; \
fi
endef

data:
	@$(call apt_install,$(NO_FMNIST),Fashion-MNIST notebooks will fail (see data/README.md))

docs-deps:
	@$(call apt_install,$(NO_CHROMIUM),tests/test_docs.py will fail (install Chromium))

debs:
	@$(call apt_install,$(NO_FMNIST) $(NO_CHROMIUM),the Fashion-MNIST notebooks or tests/test_docs.py will fail)

# the environment tests/test_wheel.py installs the built wheel into (constraints.txt, no source tree): made once per
# constraints.txt and Python version in ~/.cache/fedloge_nb with uv, hard links from uv's cache (seconds); the test
# itself builds this tree's wheel and installs it there (seconds)
wheel-env: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python tests/test_wheel.py

test: test-setup test-nbs test-py

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
