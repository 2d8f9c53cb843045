"""Bad runs end with one line and a non-zero exit, and leave the disk as it was: divergence, missing devices, unusable
or busy output folders, rejected inputs, finished runs, malformed list flags, an unreadable history on resume."""
import csv, json, os, subprocess, sys, time
from pathlib import Path
import pytest, torch
from fedloge_nb import federated
from fedloge_nb.guards import load_checkpoint

BIN = Path(sys.executable).parent / 'fedloge_nb'
TINY = ['--dataset', 'digits', '--imb_factor', '10', '--clients', '4', '--frac', '1.0', '--model', 'mlp', '--batch_size', '16',
        '--lr', '0.1', '--rounds', '2', '--eval_every', '1', '--ckpt_every', '1', '--progress', 'false']

def one_line(se): return len(se.strip().splitlines()) == 1 and 'Traceback' not in se

def files(d): return sorted(p.name for p in Path(d).iterdir()) if Path(d).exists() else None

def test_divergence_stops_with_one_line_and_keeps_the_last_good_checkpoint(tmp_path, main_in_process, monkeypatch):
    update = federated.Algorithm.client_update
    calls = []
    def blows(self, gstate, cstate, data, cfg, seed):              # 4 clients a round: round 3 turns NaN
        r = update(self, gstate, cstate, data, cfg, seed); calls.append(1)
        if len(calls) > 8: r.state = {k: v * float('nan') for k, v in r.state.items()}; r.loss = float('nan')
        return r
    monkeypatch.setattr(federated.Algorithm, 'client_update', blows)
    out = tmp_path / 'div'
    code, so, se = main_in_process('run', *TINY, '--rounds', '5', '--out', out)
    assert code == 2 and one_line(se), (code, se)
    assert 'training diverged in round 3 (client 0: loss nan' in se and 'lower --lr (now 0.1)' in se, se
    assert load_checkpoint(out / 'checkpoint.pt')['round'] == 2          # the last good one
    assert (out / 'history.csv').read_text().splitlines()[1:] and len((out / 'history.csv').read_text().splitlines()) == 3
    assert files(out) == ['checkpoint.prev.pt', 'checkpoint.pt', 'config.json', 'history.csv']   # no summary, lock released; round 1's kept too

def test_huge_learning_rate_is_reported_not_summarised(tmp_path, main_in_process):
    code, so, se = main_in_process('run', *TINY, '--lr', '1e12', '--out', tmp_path / 'x')
    assert code == 2 and one_line(se) and 'training diverged in round 1' in se and 'lower --lr (now 1e+12)' in se, se
    assert not (tmp_path / 'x' / 'summary.json').exists() and not (tmp_path / 'x' / '.lock').exists()

def test_sweep_records_a_diverged_cell_as_failed_and_does_not_rerun_it(tmp_path, main_in_process):
    f = tmp_path / 's.toml'
    f.write_text('name = "s"\n[base]\ndataset = "digits"\nimb_factor = 10\nclients = 3\nfrac = 1.0\nrounds = 2\nmodel = "mlp"\n'
                 'batch_size = 16\n[grid]\nmethods = ["fedavg"]\nlr = [0.1, 1e12]\n')
    out = tmp_path / 'o'
    code, so, se = main_in_process('sweep', f, '--out', out, '--progress', 'false', '--plots', 'false')
    assert code == 0 and '1 cell(s) failed' in se, se
    res = {r['cell']: r for r in csv.DictReader(open(out / 'results.csv'))}
    ok, bad = (next(r for c, r in res.items() if tag in c) for tag in ('lr0.1_', 'lr1e+12_'))
    assert ok['status'] == 'ok' and bad['status'] == 'failed', res
    assert 'DivergenceError: training diverged in round 1' in bad['error'] and 'lower --lr (now 1e+12)' in bad['error'], bad
    assert (bad['diverged_round'], float(bad['diverged_lr'])) == ('1', 1e12) and f"(client {bad['diverged_client']}: " in bad['error'], bad
    assert not ok.get('diverged_round') and 'diverged_round' not in next(csv.DictReader(open(out / 'summary.csv'))), ok   # fields of the failed run only
    err = next(out.glob('*/error.txt')); t = err.stat().st_mtime_ns
    code, so, se = main_in_process('sweep', f, '--out', out, '--progress', 'false', '--plots', 'false')
    assert code == 0 and '0 to run now' in se and '1 failed cell(s) not run again' in se, se
    assert err.stat().st_mtime_ns == t

@pytest.mark.parametrize('device,patch,msg', [
    ('cuda', dict(is_available=False), 'no CUDA GPU here'),
    ('cuda:3', dict(is_available=True, device_count=1), 'this machine has 1 GPU(s)'),
    ('mps', dict(mps=False), 'MPS is not available'),
    ('tpu0', {}, 'unknown device'),
])
def test_missing_device_is_refused_before_any_write(tmp_path, main_in_process, monkeypatch, device, patch, msg):
    if 'is_available' in patch: monkeypatch.setattr(torch.cuda, 'is_available', lambda: patch['is_available'])
    if 'device_count' in patch: monkeypatch.setattr(torch.cuda, 'device_count', lambda: patch['device_count'])
    if 'mps' in patch: monkeypatch.setattr(torch.backends.mps, 'is_available', lambda: patch['mps'])
    code, so, se = main_in_process('run', *TINY, '--device', device, '--out', tmp_path / 'x')
    assert code == 2 and one_line(se) and msg in se and '--device' in se, se
    assert not (tmp_path / 'x').exists()
    code, so, se = main_in_process('compare', '--methods', 'fedavg', *TINY, '--device', device, '--out', tmp_path / 'c')
    assert code == 2 and msg in se and not (tmp_path / 'c').exists(), se

def test_out_is_a_file(tmp_path, main_in_process):
    f = tmp_path / 'file'; f.write_text('keep me')
    code, so, se = main_in_process('run', *TINY, '--out', f)
    assert code == 2 and one_line(se) and 'is a file, not a folder' in se, se
    assert f.read_text() == 'keep me'
    code, so, se = main_in_process('run', *TINY, '--out', f / 'sub')
    assert code == 2 and 'cannot be created' in se, se

def test_out_not_writable(tmp_path, main_in_process, monkeypatch):
    ro = tmp_path / 'ro'; ro.mkdir(); ro.chmod(0o555)
    if os.geteuid() == 0:      # root writes through chmod: make os.access report what a normal user would see
        real = os.access
        monkeypatch.setattr(os, 'access', lambda p, m, *a, **k: False if str(p).startswith(str(ro)) else real(p, m, *a, **k))
    try:
        code, so, se = main_in_process('run', *TINY, '--out', ro / 'run')
        assert code == 2 and one_line(se) and 'not writable' in se, se
        assert files(ro) == []
    finally: ro.chmod(0o755)

def assert_rejected(main_in_process, cmd, args, out, msg):
    "`fedloge_nb cmd` with bad `args` exits 2 with one line naming `msg`, and writes nothing to `out`."
    code, so, se = main_in_process(cmd, *TINY, *args, '--out', out)
    assert code == 2 and one_line(se) and msg in se, se
    assert not out.exists()

@pytest.mark.parametrize('args,msg', [
    (['--method', 'fedprox', '--hp', 'mu=-1'], 'mu=-1 is < 0: mu takes float >= 0'),
    (['--method', 'fedloge', '--hp', 'beta=2,sse_steps=10'], 'beta'),
    (['--alpha', '-1'], 'alpha'),
])
def test_rejected_run_leaves_no_debris(tmp_path, main_in_process, args, msg):
    assert_rejected(main_in_process, 'run', args, tmp_path / 'x', msg)

def test_finished_run_is_not_overwritten_silently(tmp_path, main_in_process):
    out = tmp_path / 'r'
    assert main_in_process('run', *TINY, '--out', out)[0] == 0
    t = (out / 'summary.json').stat().st_mtime_ns
    code, so, se = main_in_process('run', *TINY, '--out', out)
    assert code == 2 and one_line(se) and 'holds a finished run' in se and '--resume' in se and '--overwrite true' in se, se
    assert (out / 'summary.json').stat().st_mtime_ns == t
    assert main_in_process('run', *TINY, '--out', out, '--resume', 'true')[0] == 0
    code, so, se = main_in_process('run', *TINY, '--out', out, '--overwrite', 'true')
    assert code == 0 and (out / 'summary.json').stat().st_mtime_ns != t, se
    assert files(out) == ['checkpoint.prev.pt', 'checkpoint.pt', 'config.json', 'history.csv', 'summary.json']
    (out / 'summary.json').unlink()
    code, so, se = main_in_process('run', *TINY, '--out', out)
    assert code == 2 and 'holds an unfinished run' in se and not (out / 'summary.json').exists(), se
    code, so, se = main_in_process('run', *TINY, '--out', out, '--resume', 'true', '--overwrite', 'true')
    assert code == 2 and 'contradict' in se, se

def test_busy_out_is_refused_with_the_holders_pid(tmp_path, main_in_process):
    out = tmp_path / 'r'; out.mkdir()
    (out / '.lock').write_text(str(os.getppid()))                   # a live process (our parent) holds it
    code, so, se = main_in_process('run', *TINY, '--out', out)
    assert code == 2 and one_line(se) and f'in use by another run (pid {os.getppid()}' in se, se
    assert files(out) == ['.lock'] and (out / '.lock').read_text() == str(os.getppid())   # nothing written, lock kept
    code, so, se = main_in_process('compare', '--methods', 'fedavg', *TINY, '--out', out)
    assert code == 2 and f'pid {os.getppid()}' in se, se
    dead = subprocess.Popen(['true']); dead.wait()                 # a killed run's stale lock is taken over
    (out / '.lock').write_text(str(dead.pid))
    assert main_in_process('run', *TINY, '--out', out)[0] == 0
    assert not (out / '.lock').exists()

def test_two_processes_on_one_out(tmp_path, main_in_process):
    out = tmp_path / 'r'
    p = subprocess.Popen([str(BIN), 'run', *TINY, '--rounds', '100000', '--ckpt_every', '1000', '--out', str(out)],
                         env={**os.environ, 'OMP_NUM_THREADS': '1'}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while not (out / 'config.json').exists() and time.time() < deadline and p.poll() is None: time.sleep(0.05)
        assert p.poll() is None and (out / '.lock').read_text() == str(p.pid)
        code, so, se = main_in_process('run', *TINY, '--rounds', '100000', '--ckpt_every', '1000', '--out', out)
        assert code == 2 and one_line(se) and f'(pid {p.pid}' in se, se
    finally: p.kill(); p.wait()

@pytest.mark.parametrize('args,msg', [
    (['--seeds', 'a,b'], "--seeds 'a,b': 'a' is not an integer; write comma-separated integers, e.g. --seeds 0,1,2"),
    (['--seeds', '0,,1'], "--seeds '0,,1' has an empty entry"),
    (['--seeds', '1,1'], "--seeds '1,1' lists 1 twice"),
    (['--methods', 'fedavg,,fedloge'], "--methods 'fedavg,,fedloge' has an empty entry"),
    (['--methods', 'fedavg,fedavg'], "--methods 'fedavg,fedavg' lists 'fedavg' twice"),
    (['--methods', ','], 'has an empty entry'),
])
def test_malformed_list_flags(tmp_path, main_in_process, args, msg):
    assert_rejected(main_in_process, 'compare', args, tmp_path / 'c', msg)

def test_resume_rebuilds_an_unreadable_history_from_the_checkpoint(tmp_path, main_in_process):
    out = tmp_path / 'r'
    assert main_in_process('run', *TINY, '--out', out)[0] == 0
    good = (out / 'history.csv').read_text()
    (out / 'history.csv').write_bytes(b'\x00\x01 not a csv')
    code, so, se = main_in_process('run', *TINY, '--out', out, '--resume', 'true')
    assert code == 0 and one_line(se) and 'history.csv was unreadable' in se and 'rebuilt it from checkpoint.pt (2 evaluation(s) up to round 2)' in se, se
    assert (out / 'history.csv').read_text() == good
    code, so, se = main_in_process('run', *TINY, '--out', out, '--resume', 'true')
    assert code == 0 and se.strip() == '', se                       # nothing to say when it is fine

def test_resume_continues_from_the_previous_checkpoint_when_the_latest_is_truncated(tmp_path, main_in_process):
    "A truncated latest checkpoint: the resume takes the one before (one line says so) and ends with the numbers of an uninterrupted run."
    ref = tmp_path / 'ref'; assert main_in_process('run', *TINY, '--rounds', '3', '--out', ref)[0] == 0
    out = tmp_path / 'r'; assert main_in_process('run', *TINY, '--rounds', '3', '--out', out)[0] == 0
    (out / 'summary.json').unlink()                                           # as if killed after the last checkpoint
    b = (out / 'checkpoint.pt').read_bytes(); (out / 'checkpoint.pt').write_bytes(b[:len(b) // 3])
    code, so, se = main_in_process('run', *TINY, '--rounds', '3', '--out', out, '--resume', 'true')
    assert code == 0 and 'is unreadable' in se and 'continuing from the previous checkpoint checkpoint.prev.pt (round 2)' in se, se
    assert [l for l in se.splitlines() if 'checkpoint' in l and 'history' not in l] == [se.splitlines()[0]], se   # one line about it
    got, want = (json.loads((d / 'summary.json').read_text()) for d in (out, ref))
    assert (got['gm_acc'], got['client_acc']) == (want['gm_acc'], want['client_acc'])
    assert [r['round'] for r in csv.DictReader(open(out / 'history.csv'))] == ['1', '2', '3']

def test_resume_with_both_checkpoints_damaged_stops_with_one_line(tmp_path, main_in_process):
    "Both checkpoints damaged: one line names both files and what to do, and never relays torch's advice to unpickle the file."
    out = tmp_path / 'r'; assert main_in_process('run', *TINY, '--out', out)[0] == 0
    (out / 'summary.json').unlink()                                           # as if killed after the last checkpoint
    b = (out / 'checkpoint.prev.pt').read_bytes(); (out / 'checkpoint.prev.pt').write_bytes(b[:len(b) // 3])   # truncated
    (out / 'checkpoint.pt').write_bytes(b'not a checkpoint')                  # overwritten: torch's weights-only refusal
    code, so, se = main_in_process('run', *TINY, '--out', out, '--resume', 'true')
    assert code == 2 and one_line(se), se
    assert 'checkpoint.pt' in se and 'checkpoint.prev.pt' in se and 'both damaged' in se and f'delete {out}' in se, se
    assert 'weights_only' not in se and 'arbitrary code' not in se, se
    assert files(out) == ['checkpoint.prev.pt', 'checkpoint.pt', 'config.json', 'history.csv']   # nothing deleted, lock released
