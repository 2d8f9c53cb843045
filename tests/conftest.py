import os, signal, subprocess, time
from pathlib import Path
import pytest

# One torch thread per test process, before any test module imports torch (as `make test` sets it): pytest-xdist's two
# workers with two threads each on a 2-core machine ran the in-process tests of test_flower_methods.py in 261 s, not 26 s.
os.environ.setdefault('OMP_NUM_THREADS', '1')

@pytest.fixture
def main_in_process(capsys):
    "Call the console script's dispatcher in this process (no interpreter start-up): args -> (exit code, stdout, stderr)."
    from fedloge_nb.cli import main
    def call(*args):
        code = 0
        try: main([*map(str, args)])
        except SystemExit as e: code = e.code
        o = capsys.readouterr()
        return code, o.out, o.err
    return call


def _kill_when(argv, ready, timeout: float = 240, poll: float = 0.005):
    "Start command `argv` (one torch thread) and SIGKILL it as soon as `ready()` holds (or it ends, or `timeout` s pass)."
    p = subprocess.Popen([*map(str, argv)], env={**os.environ, 'OMP_NUM_THREADS': '1'}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + timeout
    while time.time() < deadline and p.poll() is None and not ready(): time.sleep(poll)
    p.send_signal(signal.SIGKILL); p.wait()

def _midway(out) -> bool:
    "Does grid folder `out` hold a finished cell and another one part-way (a checkpoint without a summary)?"
    out = Path(out)
    return any(out.glob('*/summary.json')) and any(not (c.parent / 'summary.json').exists() for c in out.glob('*/checkpoint.pt'))

@pytest.fixture
def kill_when():
    "`kill_when(argv, ready)`: run a command and SIGKILL it once `ready()` is true (kill-and-resume tests)."
    return _kill_when

@pytest.fixture
def midway():
    "`midway(out)`: a grid folder with one cell finished and another part-way, the moment to kill a sweep or compare."
    return _midway


# `make test` runs two pytest-xdist workers with `--dist loadfile`: a test file is one unit of work, run on one worker
# (a file's Flower deployments one after another on their fixed ports, the docs tests on one site build). xdist's
# `loadgroup` would group across files, but with pytest 9 its group marks no longer reach the node ids (xdist 3.8 writes
# `item._nodeid`, which pytest 9 does not read), so it spreads a group's tests over both workers.
# The longest files first (seconds of one worker, idle 2-core machine, 2026-11-27): the two workers then end together
# instead of one waiting on a long file taken last. xdist queues the files in this order only with
# `--no-loadscope-reorder` (`make test-py` passes it); by default it queues them by their number of tests, which put
# the two one-test deployment files (169 s and 115 s) last, on one worker, while the other sat idle for 276 s.
FIRST = ('test_wheel.py', 'test_flower_deploy.py', 'test_docs.py', 'test_baselines_cli.py', 'test_flower.py', 'test_cli.py',
         'test_sweep.py', 'test_papers.py', 'test_scripts.py', 'test_client_store.py', 'test_flower_resilience.py')

def pytest_collection_modifyitems(config, items):
    "The files of `FIRST` first, in that order (a stable sort: the order within a file is kept)."
    rank = lambda it: FIRST.index(Path(str(it.fspath)).name) if Path(str(it.fspath)).name in FIRST else len(FIRST)
    items.sort(key=rank)
