"""A full disk under --out gives one line and leaves nothing half-written (local engine and Flower strategy); the Flower
strategy's job killed mid-run resumes on Ray to the local engine's numbers; `fedloge_nb deploy` checks its flags without Flower."""
import errno, json, os, signal, subprocess, sys
from pathlib import Path
import pytest
from fedloge_nb.federated import FedConfig
from fedloge_nb.engine import run_fl
from fedloge_nb.guards import DiskFullError, load_checkpoint, save_checkpoint

ROOT = Path(__file__).resolve().parent.parent
TINY = ['--method', 'fedloge', '--dataset', 'digits', '--imb_factor', '10', '--clients', '3', '--model', 'mlp', '--batch_size', '16',
        '--hp', 'sse_steps=100', '--rounds', '3', '--eval_every', '1', '--ckpt_every', '1']


def _cfg(**kw):
    return FedConfig(**{'method': 'fedloge', 'dataset': 'digits', 'imb_factor': 10, 'clients': 3, 'model': 'mlp', 'batch_size': 16,
                        'hp': {'sse_steps': 100}, 'rounds': 3, 'eval_every': 1, 'ckpt_every': 1, 'device': 'cpu', 'seed': 0, **kw})


@pytest.fixture
def full_disk(monkeypatch):
    "Writes of a file named `name` (a checkpoint, say) fail with ENOSPC once their data is written (before os.replace)."
    def make(name):
        real = os.fsync
        def fsync(fd):
            if name in os.readlink(f'/proc/self/fd/{fd}'): raise OSError(errno.ENOSPC, 'No space left on device')
            return real(fd)
        monkeypatch.setattr(os, 'fsync', fsync)
    return make


def _clean(out: Path):
    "Nothing half-written: no temp file, no checkpoint or summary, the files there are complete."
    assert not [p.name for p in out.iterdir() if p.name.endswith('.tmp')]
    assert not (out / 'checkpoint.pt').exists() and not (out / 'summary.json').exists()
    json.loads((out / 'config.json').read_text())


def test_full_disk_local_run_one_line(main_in_process, tmp_path, full_disk):
    out = tmp_path / 'r'
    full_disk('checkpoint.pt')
    code, o, e = main_in_process('run', *TINY, '--device', 'cpu', '--progress', 'false', '--out', out)
    assert code == 2 and len(e.strip().splitlines()) == 1 and 'Traceback' not in e, e
    assert e.startswith('fedloge_nb run: error: no space left on the disk of ') and str(out.absolute()) in e, e
    _clean(out)
    assert (out / 'history.csv').read_text().count('\n') == 2                 # round 1's row, complete


def test_full_disk_flower_strategy(tmp_path, full_disk):
    from fedloge_nb.flower import EngineStrategy, LocalGrid
    out = tmp_path / 'f'
    full_disk('checkpoint.pt')
    with pytest.raises(DiskFullError, match=f'no space left on the disk of {out.absolute()}'):
        EngineStrategy(_cfg(), out=out, progress=False).start(LocalGrid(3))
    _clean(out)


def test_deploy_command_checks_flags_without_flower(main_in_process, tmp_path):
    code = "import sys, fedloge_nb.flower_deploy as f; from fedloge_nb.cli import COMMANDS; assert COMMANDS['deploy'] is f.deploy; print('flwr' in sys.modules)"
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, cwd=ROOT)
    assert r.stdout.strip() == 'False', r.stderr                           # registering the command does not import Flower
    import fedloge_nb.flower_deploy  # noqa: F401
    c, o, e = main_in_process('deploy', *TINY, '--min_clients', '0', '--out', tmp_path / 'd')
    assert c == 2 and 'fedloge_nb deploy: error: --min_clients 0' in e and not (tmp_path / 'd').exists(), e


def test_flower_app_folder_is_the_packaged_app():
    from fedloge_nb.flower_deploy import APP_FILES
    assert {n: (ROOT / 'flower_app' / n).read_text() for n in APP_FILES} == APP_FILES


def test_strategy_killed_then_resumed_exactly_on_ray(tmp_path):
    """SIGKILL the Flower strategy's job in round 3, after its clients saved their states and before the server aggregates
    (the last checkpoint: round 2), then resume it as a Ray simulation (`run_flower(resume=True)`): the local engine's
    numbers. The killed job runs the same strategy and ClientApp handlers on `LocalGrid` in one process, with the client
    states in OUT/client_state where a simulation keeps them: one Ray start fewer than killing a simulation (the
    deployment's kill-and-resume, every process killed, is in tests/test_wheel.py)."""
    from fedloge_nb.flower_simulation import run_flower
    out, cfg = tmp_path / 's', _cfg(rounds=4, ckpt_every=2)
    code = ("import json, os, signal; from fedloge_nb import flower as f; from fedloge_nb.federated import FedConfig\n"
            "agg = f.EngineStrategy.aggregate_train\n"
            "def die(self, rnd, replies):\n"            # the job kills itself at a chosen point: a run this fast leaves
            "    if rnd == 3: os.kill(os.getpid(), signal.SIGKILL)\n"   # no time to aim from outside
            "    return agg(self, rnd, replies)\n"
            "f.EngineStrategy.aggregate_train = die\n"
            f"cfg = FedConfig(**json.loads({json.dumps(cfg.__dict__)!r}))\n"
            f"f.EngineStrategy(cfg, out={str(out)!r}, progress=False, state_dir={str(out / 'client_state')!r}).start(f.LocalGrid(cfg.clients))")
    p = subprocess.run([sys.executable, '-c', code], cwd=ROOT, env={**os.environ, 'OMP_NUM_THREADS': '1'}, capture_output=True, text=True, timeout=600)
    assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]
    assert load_checkpoint(out / 'checkpoint.pt')['round'] == 2 and not (out / 'summary.json').exists()
    assert any((out / 'client_state').rglob('r3.pt')), 'the clients saved round 3 before the kill'
    ck = load_checkpoint(out / 'checkpoint.pt'); ck['history'][-1]['train_time_s'] = 12345.0
    save_checkpoint(out / 'checkpoint.pt', ck)                         # a mark that only a resume carries into history.csv
    fl = run_flower(cfg, out=out, workers=1, progress=False, resume=True)
    loc = run_fl(cfg, progress=False)
    keys = [k for k in loc.summary if k.startswith(('gm_', 'pm_', 'phi_', 'psi_', 'client_acc'))]
    assert {k: fl[k] for k in keys} == {k: loc.summary[k] for k in keys}
    import csv
    with open(out / 'history.csv', newline='') as f: rows = list(csv.DictReader(f))
    assert [float(r['pm_acc']) for r in rows] == [h['pm_acc'] for h in loc.history]
    assert (rows[1]['round'], float(rows[1]['train_time_s'])) == ('2', 12345.0), rows[1]     # resumed, not started over
