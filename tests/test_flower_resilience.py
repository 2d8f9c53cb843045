"""A full disk under --out gives one line and leaves nothing half-written (local engine and Flower strategy); a Flower
simulation killed mid-run resumes to the local engine's numbers; `fedloge_nb deploy` checks its flags without Flower."""
import errno, json, os, signal, subprocess, sys, time, uuid
from pathlib import Path
import pytest
from fedloge_nb.federated import FedConfig
from fedloge_nb.engine import run_fl
from fedloge_nb.guards import DiskFullError, load_checkpoint

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


def test_simulation_killed_then_resumed_exactly(tmp_path):
    "SIGKILL a Ray simulation (driver and Ray's processes) in round 3, after its clients saved their states and before the server aggregates (the last checkpoint: round 2); resume=True gives the local engine's numbers."
    from fedloge_nb.flower_simulation import run_flower
    out, tag, cfg = tmp_path / 's', uuid.uuid4().hex, _cfg(rounds=4, ckpt_every=2)
    code = ("import json, os, signal; from fedloge_nb import flower_simulation as f; from fedloge_nb.federated import FedConfig\n"
            "agg = f.EngineStrategy.aggregate_train\n"
            "def die(self, rnd, replies):\n"            # the job kills its own process group at a chosen point: a run this fast
            "    if rnd == 3: os.killpg(0, signal.SIGKILL)\n"   # leaves no time to aim from outside
            "    return agg(self, rnd, replies)\n"
            "f.EngineStrategy.aggregate_train = die\n"
            f"f.run_flower(FedConfig(**json.loads({json.dumps(cfg.__dict__)!r})), out={str(out)!r}, workers=1, progress=False)")
    env = {**os.environ, 'OMP_NUM_THREADS': '1', 'FEDLOGE_TEST_TAG': tag}
    with open(tmp_path / 'stderr.txt', 'w') as err:            # a file, not a pipe: Ray's processes may hold it open after the kill
        p = subprocess.Popen([sys.executable, '-c', code], cwd=ROOT, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=err)
        try: p.wait(timeout=600)
        finally:
            if p.poll() is None: os.killpg(p.pid, signal.SIGKILL); p.wait()
            for d in Path('/proc').iterdir():                            # Ray's processes that left the group: ours carry the tag
                try:
                    if d.name.isdigit() and f'FEDLOGE_TEST_TAG={tag}'.encode() in (d / 'environ').read_bytes(): os.kill(int(d.name), signal.SIGKILL)
                except OSError: pass
    assert p.returncode == -signal.SIGKILL, (tmp_path / 'stderr.txt').read_text()[-2000:]
    assert load_checkpoint(out / 'checkpoint.pt')['round'] == 2 and not (out / 'summary.json').exists()
    fl = run_flower(cfg, out=out, workers=1, progress=False, resume=True)
    loc = run_fl(cfg, progress=False)
    keys = [k for k in loc.summary if k.startswith(('gm_', 'pm_', 'phi_', 'psi_', 'client_acc'))]
    assert {k: fl[k] for k in keys} == {k: loc.summary[k] for k in keys}
    import csv
    with open(out / 'history.csv', newline='') as f: rows = list(csv.DictReader(f))
    assert [float(r['pm_acc']) for r in rows] == [h['pm_acc'] for h in loc.history]
