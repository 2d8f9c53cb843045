"""The package as a user gets it: the wheel built from this tree, installed with constraints.txt into a virtual environment
of its own (no system site-packages, no editable install, no source tree on the path, run from another folder), then
`fedloge_nb --help`, a 2-round `run` and a 2-round `deploy` with 2 SuperNodes (the packaged Flower app: ServerApp,
ClientApps, TLS) that is killed after round 1 (every process, SIGKILL) and resumed to the numbers of the local run. The
Ray simulation (`run --backend flower`) equal to the local engine is tested from the source tree (tests/test_flower.py);
it runs the same packaged ClientApp code as the deployment, so it is not repeated here.

The environment is made fresh once per constraints.txt and Python version, with nothing but `python -m venv` and
`uv pip install WHEEL -c constraints.txt` (in `~/.cache/fedloge_nb/`, or `$FEDLOGE_NB_WHEEL_VENV`): uv resolves the wheel's
requirements itself and links torch's and Flower's 6 GB from its cache, filled when `make setup` installed the same
versions into .venv (seconds; pip had unpacked them a second time, minutes). Each later run replaces only fedloge_nb
in it with the wheel it has just built, then checks with `pip check` that the wheel's declared requirements hold there.
`FEDLOGE_NB_WHEEL_FRESH=1` builds a new environment every time."""
import hashlib, json, os, re, shutil, signal, subprocess, sys, zipfile
from pathlib import Path
import pytest
from procs import alive_in, history_rows, start_deploy, wait_until

ROOT = Path(__file__).resolve().parent.parent
TINY = ['--dataset', 'digits', '--imb_factor', '10', '--clients', '2', '--frac', '1.0', '--model', 'mlp', '--batch_size', '16', '--seed', '1']
FEDLOGE = ['--method', 'fedloge', *TINY, '--hp', 'sse_steps=100', '--rounds', '2', '--eval_every', '2', '--ckpt_every', '1']   # evaluated at the end


def _venv_dir() -> Path:
    if os.environ.get('FEDLOGE_NB_WHEEL_VENV'): return Path(os.environ['FEDLOGE_NB_WHEEL_VENV'])
    key = hashlib.sha1((ROOT / 'constraints.txt').read_bytes() + sys.version.encode()).hexdigest()[:12]
    return Path.home() / '.cache' / 'fedloge_nb' / f'wheel-venv-{key}'


def _run(cmd, cwd, env, timeout=600):
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{' '.join(map(str, cmd))} -> {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout


def prepare(tmp: Path):
    "Build the wheel in `tmp` and install it: (bin folder of its environment, `tmp`, the environment variables to run it with)."
    _run([sys.executable, '-m', 'pip', 'wheel', '--no-deps', '--no-build-isolation', '-q', '-w', tmp / 'dist', ROOT], ROOT, os.environ, 300)
    wheel = next((tmp / 'dist').glob('fedloge_nb-*.whl'))
    names = zipfile.ZipFile(wheel).namelist()
    assert {'fedloge_nb/flower_deploy.py', 'fedloge_nb/flower_client.py', 'fedloge_nb/papers/gmv_table1.csv'} <= set(names), names
    # uv installs without compiling to bytecode (compiling all of torch and Flower would take 40 s of the set-up), so the
    # environment's modules are compiled when first imported and the bytecode kept: PYTHONDONTWRITEBYTECODE is left out
    env = {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', 'VIRTUAL_ENV', 'PYTHONDONTWRITEBYTECODE')}
    env.update(OMP_NUM_THREADS='1', PIP_DISABLE_PIP_VERSION_CHECK='1')
    venv = tmp / 'venv' if os.environ.get('FEDLOGE_NB_WHEEL_FRESH') else _venv_dir()
    py, uv = venv / 'bin' / 'python', [sys.executable, '-m', 'uv', 'pip', 'install', '-q', '--python', venv / 'bin' / 'python']
    if not (venv / '.complete').exists():                            # a new environment: the wheel and its requirements, resolved by uv
        shutil.rmtree(venv, ignore_errors=True); venv.parent.mkdir(parents=True, exist_ok=True)
        _run([sys.executable, '-m', 'venv', venv], tmp, env)
        _run([*uv, wheel, '-c', ROOT / 'constraints.txt'], tmp, env, 3600)
        (venv / '.complete').write_text(str(wheel.name))
    else:                                                            # the same environment: this wheel in place of the last one
        _run([*uv, '--no-deps', '--reinstall-package', 'fedloge_nb', wheel], tmp, env)
    _run([py, '-m', 'pip', 'check'], tmp, env)                       # every declared requirement of the wheel holds
    where = _run([py, '-c', 'import fedloge_nb, sys; print(fedloge_nb.__file__); print(sys.path)'], tmp, env)
    assert str(venv) in where.splitlines()[0] and str(ROOT) not in where, where   # the installed copy, no source tree on the path
    return venv / 'bin', tmp, env


@pytest.fixture(scope='module')
def installed(tmp_path_factory):
    "(bin folder of the environment with the wheel installed, a folder outside the source tree, its environment variables)."
    return prepare(tmp_path_factory.mktemp('wheel'))


def test_wheel_commands(installed):
    """--help, a 2-round local run, and a 2-round deployment with 2 SuperNodes killed after round 1 (the command,
    SuperLink, SuperNodes, ServerApp: SIGKILL) then resumed, all from the installed wheel."""
    from fedloge_nb.guards import load_checkpoint
    bin_, tmp, env = installed
    exe = bin_ / 'fedloge_nb'
    assert 'deploy' in _run([exe, '--help'], tmp, env)
    last = lambda out: json.loads(out.strip().splitlines()[-1])
    loc = last(_run([exe, 'run', *FEDLOGE, '--out', tmp / 'local', '--progress', 'false'], tmp, env))
    assert loc['method'] == 'fedloge' and (tmp / 'local' / 'summary.json').exists()
    dep, dep_args = tmp / 'dep', [exe, 'deploy', *FEDLOGE, '--out', tmp / 'dep']
    p, _, home = start_deploy([*dep_args, '--port', '19420'], tmp, env)
    try: wait_until(lambda: (dep / 'checkpoint.pt').exists(), p)
    finally:
        p.kill(); p.wait()
        for pid in alive_in(home): os.kill(pid, signal.SIGKILL)
        shutil.rmtree(home, ignore_errors=True)                     # the killed deployment's own folder (certificates, keys)
    assert load_checkpoint(dep / 'checkpoint.pt')['round'] in (1, 2) and not (dep / 'summary.json').exists()
    text = _run([*dep_args, '--port', '19440', '--resume', 'true'], tmp, env)
    assert last(text)['backend'] == 'flower-deployment'
    fl, lo = (json.loads((d / 'summary.json').read_text()) for d in (dep, tmp / 'local'))
    keys = [k for k in lo if k.startswith(('gm_', 'pm_', 'phi_', 'psi_'))]
    assert 'pm_acc' in keys and {k: fl[k] for k in keys} == {k: lo[k] for k in keys}
    rows = history_rows(dep)
    assert [r['pm_acc'] for r in rows] == [r['pm_acc'] for r in history_rows(tmp / 'local')] and len(rows) == 1
    home = re.search(r'FLWR_HOME=(\S+)', text).group(1)
    assert not alive_in(home), 'processes left behind'


if __name__ == '__main__':                                           # `make wheel-env`: the environment made ahead of the tests, when missing
    import tempfile                                                  # (the test itself builds this tree's wheel and puts it in place)
    venv = _venv_dir()
    if (venv / '.complete').exists() and not os.environ.get('FEDLOGE_NB_WHEEL_FRESH'): print(f"fedloge_nb wheel environment: {venv} (made)")
    else: print(f"fedloge_nb wheel environment: {prepare(Path(tempfile.mkdtemp()))[0].parent}")
