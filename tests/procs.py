"""Helpers of the deployment tests (tests/test_flower_deploy.py, tests/test_wheel.py): start `fedloge_nb deploy` and
read its pids, wait for a condition, find the processes a deployment left behind, read a run's history.csv."""
import csv, re, subprocess, time
from pathlib import Path


def alive_in(home) -> list:
    "Live (non-zombie) processes of the deployment whose private FLWR_HOME is `home` (every process it starts carries it)."
    tag, out = f'FLWR_HOME={home}'.encode() + b'\0', []
    for d in Path('/proc').iterdir():
        if not d.name.isdigit(): continue
        try:
            if tag in (d / 'environ').read_bytes() and (d / 'stat').read_text().rsplit(')', 1)[1].split()[0] != 'Z': out.append(int(d.name))
        except OSError: pass
    return out


def history_rows(out) -> list:
    "The rows of OUT/history.csv ([] when there is none yet)."
    if not (Path(out) / 'history.csv').exists(): return []
    with open(Path(out) / 'history.csv', newline='') as f: return list(csv.DictReader(f))


def start_deploy(argv, cwd, env):
    "Start a deploy command `argv`; returns (process, pids [link, node0, ...], FLWR_HOME) once it printed its first line."
    p = subprocess.Popen([*map(str, argv)], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()                                       # "SuperLink ... (pids [link, node0, ...]) ...; FLWR_HOME=..."
    m = re.search(r'pids \[([\d, ]+)\].*FLWR_HOME=(\S+)', line)
    assert m, (line, p.stderr.read() if p.poll() is not None else '')
    return p, [int(x) for x in m.group(1).split(',')], m.group(2)


def wait_until(cond, p, limit=400):
    "Poll `cond()` every 0.5 s while process `p` runs; fail with its stderr if it ends first, or after `limit` s."
    t0 = time.monotonic()
    while not cond():
        assert p.poll() is None and time.monotonic() - t0 < limit, p.stderr.read() if p.poll() is not None else f'not within {limit} s'
        time.sleep(0.5)
