"""A full disk under --out gives one line and leaves nothing half-written (local engine and Flower strategy);
`fedloge_nb deploy` checks its flags without Flower. (The Flower strategy's job killed mid-run and resumed on Ray is in
tests/test_flower.py, in the same simulation as its other runs.)"""
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
