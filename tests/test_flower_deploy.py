"""Flower deployments on this machine (`fedloge_nb deploy` via scripts/flower_deploy.py), stock `flower-superlink` /
`flower-supernode` / `flwr` processes: TLS and authenticated SuperNodes, a lost SuperNode survived, a killed deployment
resumed exactly, and no process left behind. (Each message starts a `flwr-clientapp` process, Flower's default
isolation: the runs are kept to a few rounds. The methods' message rounds are checked against the engine on
`LocalGrid` in tests/test_flower_methods.py; the deployment adds nothing method-specific.)"""
import csv, json, os, re, signal, subprocess, sys, time
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent
TINY = ['--method', 'fedloge', '--dataset', 'digits', '--imb_factor', '10', '--clients', '3', '--frac', '1.0', '--model', 'mlp',
        '--batch_size', '16', '--seed', '1', '--hp', 'sse_steps=100', '--eval_every', '1']


def _alive_with(tag: bytes) -> list:
    "Live (non-zombie) processes whose environment contains `tag`."
    out = []
    for d in Path('/proc').iterdir():
        if not d.name.isdigit(): continue
        try:
            if tag in (d / 'environ').read_bytes() and (d / 'stat').read_text().rsplit(')', 1)[1].split()[0] != 'Z': out.append(int(d.name))
        except OSError: pass
    return out


# an HTTP(S) proxy in the environment that nothing answers at: the deployment's links are all on loopback and must not use it
DEAD_PROXY = {k: 'http://127.0.0.1:9' for k in ('HTTP_PROXY', 'HTTPS_PROXY', 'http_proxy', 'https_proxy')}


def _deploy(out, port, *args, env_extra=None, tiny=TINY):
    "Start scripts/flower_deploy.py; returns (process, pids [link, node0, ...], FLWR_HOME) once it printed its first line."
    env = {**os.environ, 'OMP_NUM_THREADS': '1', 'PYTHONPATH': os.pathsep.join([str(ROOT), os.environ.get('PYTHONPATH', '')]), **(env_extra or {})}
    p = subprocess.Popen([sys.executable, 'scripts/flower_deploy.py', *tiny, '--port', str(port), '--out', str(out), *args],
                         cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()                                       # "SuperLink ... (pids [link, node0, ...]) ...; FLWR_HOME=..."
    m = re.search(r'pids \[([\d, ]+)\].*FLWR_HOME=(\S+)', line)
    assert m, (line, p.stderr.read() if p.poll() is not None else '')
    return p, [int(x) for x in m.group(1).split(',')], m.group(2)


def _wait(cond, p, limit=400):
    t0 = time.monotonic()
    while not cond():
        assert p.poll() is None and time.monotonic() - t0 < limit, p.stderr.read() if p.poll() is not None else f'not within {limit} s'
        time.sleep(0.5)


def _rows(out):
    if not (out / 'history.csv').exists(): return []
    with open(out / 'history.csv', newline='') as f: return list(csv.DictReader(f))


def test_lost_supernode_the_job_goes_on(tmp_path):
    "One SuperNode killed after round 1: the job finishes with the other two (and a user's HTTP(S) proxy is not in the way)."
    out = tmp_path / 'dep'
    fedavg = [a if a != 'fedloge' else 'fedavg' for a in TINY[:TINY.index('--hp')] + TINY[TINY.index('--hp') + 2:]]
    fedavg[fedavg.index('--eval_every') + 1] = '2'                   # evaluated once, at the end: 3 ClientApp processes fewer
    p, pids, home = _deploy(out, 19300, '--rounds', '2', '--ckpt_every', '1', '--timeout', '60', env_extra=DEAD_PROXY, tiny=fedavg)
    try:
        _wait(lambda: (out / 'checkpoint.pt').exists(), p)           # round 1 done (with all three clients: no failure recorded)
        os.kill(pids[1], signal.SIGKILL)                             # the SuperNode of client 0 dies mid-run
        so, se = p.communicate(timeout=600)
    finally:
        if p.poll() is None: p.send_signal(signal.SIGTERM); p.wait(60)
    assert p.returncode == 0, (p.returncode, so, se)
    s = json.loads((out / 'summary.json').read_text())
    rows = _rows(out)
    assert [(int(r['round']), int(r['clients_asked']), int(r['clients_answered'])) for r in rows] == [(2, 3, 2)], rows
    assert s['client_failures'] and all(f['client'] == 0 and '1' not in f['what'] for f in s['client_failures']), s['client_failures']
    assert s['pm_clients'] == 2 and json.loads(so.strip().splitlines()[-1])['backend'] == 'flower-deployment'
    assert not _alive_with(f'FLWR_HOME={home}'.encode() + b'\0'), 'processes left behind'


def test_killed_deployment_resumes_exactly(tmp_path):
    "SIGKILL the deployment (script, SuperLink, SuperNodes, ServerApp) after a checkpoint, resume: the local engine's numbers."
    from fedloge_nb.federated import FedConfig
    from fedloge_nb.engine import run_fl
    from fedloge_nb.guards import load_checkpoint
    out, args = tmp_path / 'dep', ['--rounds', '2', '--ckpt_every', '1']
    two = [*TINY[:TINY.index('--clients') + 1], '2', *TINY[TINY.index('--clients') + 2:]]      # 2 SuperNodes: fewer processes
    p, pids, home = _deploy(out, 19320, *args, tiny=two)
    try: _wait(lambda: (out / 'checkpoint.pt').exists(), p)
    finally:
        p.kill(); p.wait()
        for pid in _alive_with(f'FLWR_HOME={home}'.encode() + b'\0'): os.kill(pid, signal.SIGKILL)
        import shutil; shutil.rmtree(home, ignore_errors=True)          # the killed deployment's own folder (certificates, keys)
    assert load_checkpoint(out / 'checkpoint.pt')['round'] in (1, 2) and not (out / 'summary.json').exists()
    p, _, home = _deploy(out, 19340, *args, '--resume', 'true', tiny=two)
    so, se = p.communicate(timeout=600)
    assert p.returncode == 0, (so, se)
    cfg = FedConfig(method='fedloge', dataset='digits', imb_factor=10, clients=2, frac=1.0, model='mlp', batch_size=16, seed=1,
                    hp={'sse_steps': 100}, eval_every=1, rounds=2, ckpt_every=1, device='cpu')
    loc, fl = run_fl(cfg, progress=False), json.loads((out / 'summary.json').read_text())
    keys = [k for k in loc.summary if k.startswith(('gm_', 'pm_', 'phi_', 'psi_'))]
    assert {k: fl[k] for k in keys} == {k: loc.summary[k] for k in keys}
    assert [float(r['pm_acc']) for r in _rows(out)] == [h['pm_acc'] for h in loc.history]
    assert not _alive_with(f'FLWR_HOME={home}'.encode() + b'\0'), 'processes left behind'


def test_unregistered_supernode_is_refused(tmp_path):
    "TLS + SuperNode authentication: a node whose key the SuperLink does not know is refused; a registered one connects."
    from fedloge_nb.flower_deploy import Deployment
    dep = Deployment(2, 19360, tmp_path / 'logs')
    try:
        dep.start_superlink()
        good, stranger = dep.start_supernode(0), dep.start_supernode(1, register=False)
        stranger.wait(timeout=240)
        assert stranger.returncode != 0 and 'Failed to activate SuperNode' in (tmp_path / 'logs' / 'supernode_1.log').read_text()
        code, text = dep.flwr('supernode', 'ls', 'deploy', '--format', 'json')
        assert code == 0 and good.poll() is None, text
        assert [n['status'] for n in json.loads(text[text.index('{'):])['nodes']] == ['online'], text   # the registered one only
    finally: dep.stop()
    assert not _alive_with(f'FLWR_HOME={dep.home}'.encode() + b'\0')
