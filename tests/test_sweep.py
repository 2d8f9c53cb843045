"""`fedloge_nb sweep` end to end: SIGKILL in the middle of a sweep, rerun, finished cells are not redone and the
aggregate is complete and equal to an uninterrupted sweep; bad sweep files; dry runs; cell locks and two workers on one sweep."""
import csv, json, os, subprocess, sys
from pathlib import Path
import pytest

BIN = Path(sys.executable).parent / 'fedloge_nb'
ENV = {**os.environ, 'OMP_NUM_THREADS': '1'}
TINY = '''
name = "tiny"
[base]
dataset = "digits"
imb_factor = 10
clients = 4
frac = 1.0
rounds = 6
model = "mlp"
batch_size = 16
lr = 0.1
eval_every = 2
ckpt_every = 1
[grid]
methods = ["fedavg", "fedprox"]
seeds = [0, 1, 2]
[hp.fedprox]
mu = 0.1
[report]
converge_at = [30]
'''
N_CELLS = 6

def sweep(*args, check=True, timeout=300):
    p = subprocess.run([str(BIN), 'sweep', *map(str, args)], capture_output=True, text=True, env=ENV, timeout=timeout)
    if check and p.returncode != 0: raise AssertionError(f"exit {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}")
    return p

def rows(path):
    with open(path) as f: return list(csv.DictReader(f))

def no_times(r):
    "A results row without wall-clock columns."
    return {k: v for k, v in r.items() if not k.endswith(('time_s', 'per_round'))}

@pytest.fixture
def tiny(tmp_path):
    cfg = tmp_path / 'tiny.toml'; cfg.write_text(TINY); return cfg

def test_kill_and_continue(tmp_path, tiny, kill_when, midway, main_in_process):
    out = tmp_path / 'killed'
    kill_when([BIN, 'sweep', tiny, '--out', out, '--progress', 'false'], lambda: midway(out))   # one cell done, another part-way
    done = {s: s.stat().st_mtime_ns for s in out.glob('*/summary.json')}
    assert 1 <= len(done) < N_CELLS, f"{len(done)} cells were done when the sweep was killed: make the cells longer"
    assert list((out / '.locks').glob('*.lock'))                      # the running cell's lock, left by the killed sweep, taken over below
    r = sweep(tiny, '--out', out, '--progress', 'false')
    assert f'{len(done)} done, {N_CELLS - len(done)} to run now' in r.stderr, r.stderr
    assert {s: s.stat().st_mtime_ns for s in done} == done            # finished cells were not redone
    assert len(list(out.glob('*/summary.json'))) == N_CELLS
    assert not list(out.glob('*/checkpoint.pt')) and not list((out / '.locks').glob('*.lock'))
    res = rows(out / 'results.csv')
    assert len(res) == N_CELLS and {x['status'] for x in res} == {'ok'}
    summ = rows(out / 'summary.csv')
    assert [(s['method'], s['n_seeds'], s['n_failed'], s['n_pending']) for s in summ] == [('fedavg', '3', '0', '0'), ('fedprox', '3', '0', '0')]
    for s in summ:
        vals = [float(x['gm_acc']) for x in res if x['group'] == s['group']]
        assert abs(float(s['gm_acc']) - sum(vals) / 3) < 1e-6 and float(s['gm_acc_std']) >= 0
    assert 'rounds_to_gm_acc_30' in summ[0]
    from fedloge_nb.sweep import load_histories
    hist = load_histories(out)                                          # the cells' own history.csv, a row per (cell, round), with the cells' labels
    assert len(hist) == N_CELLS * 3 and not (out / 'histories.csv').exists()   # rounds 2, 4, 6 of every cell
    assert sorted(set(hist[['method', 'seed', 'round']].itertuples(index=False, name=None))) == [(m, s, r) for m in ('fedavg', 'fedprox') for s in (0, 1, 2) for r in (2, 4, 6)]
    for png in ('bars_gm_acc.png', 'bars_pm_acc.png', 'curves_digits_if10_a0.5.png'): assert (out / 'plots' / png).stat().st_size > 0
    # a killed and continued sweep gives the numbers of an uninterrupted one
    full = tmp_path / 'full'                                            # uninterrupted, in this process (one torch thread)
    assert main_in_process('sweep', tiny, '--out', full, '--progress', 'false', '--plots', 'false')[0] == 0
    assert [no_times(x) for x in rows(full / 'results.csv')] == [no_times(x) for x in res]
    # a third run trains nothing
    code, _, err = main_in_process('sweep', tiny, '--out', out, '--progress', 'false')
    assert code == 0 and f'{N_CELLS} done, 0 to run now' in err, err
    assert {s: s.stat().st_mtime_ns for s in done} == done

def test_dry_run_only_max_cells(tmp_path, tiny, main_in_process):
    out = tmp_path / 'o'
    code, so, se = main_in_process('sweep', tiny, '--out', out, '--dry_run')
    assert code == 0 and so.count('todo') == N_CELLS and 'digits_if10_a0.5_fedprox_s2' in so and not out.exists()
    code, so, se = main_in_process('sweep', tiny, '--out', out, '--only', 'fedprox', '--max_cells', '1', '--progress', 'false', '--plots', 'false')
    assert code == 0 and [p.parent.name for p in out.glob('*/summary.json')] == ['digits_if10_a0.5_fedprox_s0']
    res = rows(out / 'results.csv')
    assert [x['status'] for x in res].count('pending') == N_CELLS - 1
    code, so, se = main_in_process('sweep', tiny, '--out', out, '--dry_run')
    assert 'done      digits_if10_a0.5_fedprox_s0' in so

@pytest.mark.parametrize('text,msg', [
    ('nosuch = 1', "unknown key 'nosuch' in the sweep file; known keys: name"),
    ('[base]\nroundz = 3', "unknown key 'roundz' in [base]"),
    ('[grid]\nmethods = ["fedavg"]\nseedz = [0]', "unknown key 'seedz' in [grid]"),
    ('[grid]\nmethods = ["fedloge"]\n[hp.fedloge]\nbetta = 0.5', "unknown key 'betta' in [hp.fedloge]; known keys: beta"),
    ('[grid]\nmethods = ["fedavg"]\noverrides = [{hp = {gamma = 1.0}}]', "unknown key 'gamma'"),
    ('[grid]\nmethods = ["fedfoo"]', 'known methods'),
    ('[grid]\nseeds = 0', 'non-empty list'),
    ('[report]\nplot = 1', "unknown key 'plot' in [report]"),
    ('name = [', 'not valid TOML'),
])
def test_bad_sweep_files(tmp_path, main_in_process, text, msg):
    f = tmp_path / 'bad.toml'; f.write_text(text)
    code, so, se = main_in_process('sweep', f, '--out', tmp_path / 'o')
    assert code == 2 and msg in se and 'Traceback' not in se, se
    assert not (tmp_path / 'o').exists()

def test_bad_file_from_the_shell(tmp_path):
    f = tmp_path / 'bad.toml'; f.write_text('[grid]\nmethodz = ["fedavg"]')
    r = sweep(f, check=False)
    assert r.returncode == 2 and "unknown key 'methodz' in [grid]" in r.stderr and 'Traceback' not in r.stderr

def test_missing_file_and_lock(tmp_path, tiny, main_in_process):
    code, so, se = main_in_process('sweep', tmp_path / 'nosuch.toml')
    assert code == 2 and 'no sweep file' in se
    out = tmp_path / 'o'; (out / '.locks').mkdir(parents=True)
    (out / '.locks' / 'digits_if10_a0.5_fedavg_s0.lock').write_text(str(os.getppid()))   # a live process runs this cell
    code, so, se = main_in_process('sweep', tiny, '--out', out, '--only', 'fedavg_s[01]$')
    assert code == 0 and 'skipped, another live process holds their lock' in se and 'fedavg_s0' in se
    assert not (out / 'digits_if10_a0.5_fedavg_s0').exists() and (out / 'digits_if10_a0.5_fedavg_s1' / 'summary.json').exists()

def test_two_workers_share_one_sweep(tmp_path, tiny):
    out = tmp_path / 'o'
    ps = [subprocess.Popen([str(BIN), 'sweep', str(tiny), '--out', str(out), '--progress', 'false', '--plots', 'false'],
                           env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    res = [p.communicate(timeout=300) for p in ps]
    assert all(p.returncode == 0 for p in ps), res
    r = rows(out / 'results.csv')
    assert len(r) == N_CELLS and all(x['status'] == 'ok' for x in r), r
    assert not list((out / '.locks').iterdir())                          # every lock released
