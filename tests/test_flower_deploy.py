"""Flower deployments on this machine (`fedloge_nb deploy` via scripts/flower_deploy.py), stock `flower-superlink` /
`flower-supernode` / `flwr` processes: TLS and authenticated SuperNodes (a stranger refused), a lost SuperNode survived,
and no process left behind. A killed deployment resumed exactly runs from the installed wheel (tests/test_wheel.py). (Each message starts a
`flwr-clientapp` process, Flower's default isolation: the runs are kept to a few rounds. The methods' message rounds
are checked against the engine on `LocalGrid` in tests/test_flower_methods.py; the deployment adds nothing
method-specific.)"""
import json, os, signal, subprocess, sys
from pathlib import Path
from procs import alive_in, history_rows, start_deploy, wait_until

ROOT = Path(__file__).resolve().parent.parent
TINY = ['--method', 'fedavg', '--dataset', 'digits', '--imb_factor', '10', '--clients', '2', '--frac', '1.0', '--model', 'mlp',
        '--batch_size', '16', '--seed', '1']


# an HTTP(S) proxy in the environment that nothing answers at: the deployment's links are all on loopback and must not use it
DEAD_PROXY = {k: 'http://127.0.0.1:9' for k in ('HTTP_PROXY', 'HTTPS_PROXY', 'http_proxy', 'https_proxy')}


def _deploy(out, port, *args, env_extra=None, tiny=TINY):
    "Start scripts/flower_deploy.py; returns (process, pids [link, node0, ...], FLWR_HOME) once it printed its first line."
    env = {**os.environ, 'OMP_NUM_THREADS': '1', 'PYTHONPATH': os.pathsep.join([str(ROOT), os.environ.get('PYTHONPATH', '')]), **(env_extra or {})}
    return start_deploy([sys.executable, 'scripts/flower_deploy.py', *tiny, '--port', str(port), '--out', str(out), *args], ROOT, env)


def test_lost_supernode_the_job_goes_on(tmp_path):
    """One of two SuperNodes killed after round 1: the job finishes with the other (and a user's HTTP(S) proxy is not in
    the way). Meanwhile a stranger, a SuperNode with the deployment's CA but a key the SuperLink does not know, is refused
    (TLS + SuperNode authentication), while the two registered ones train."""
    from fedloge_nb.flower_deploy import make_node_key
    out = tmp_path / 'dep'
    # evaluated once, at the end; --timeout: how long the ServerApp waits for the dead node's reply, which must leave room
    # for the live nodes' ClientApp processes on a busy machine (at 30 s the test failed beside two sweep workers; the
    # wait is idle time of one test worker, so it is kept at 45 s rather than 60)
    p, pids, home = _deploy(out, 19300, '--rounds', '2', '--eval_every', '2', '--ckpt_every', '1', '--timeout', '45', env_extra=DEAD_PROXY)
    try:
        key, _ = make_node_key(tmp_path / 'stranger', 'stranger')        # never registered with the SuperLink
        log = tmp_path / 'stranger.log'
        with open(log, 'w') as f:
            stranger = subprocess.Popen([Path(sys.executable).parent / 'flower-supernode', '--root-certificates', Path(home) / 'certs' / 'ca.crt',
                                         '--auth-supernode-private-key', key, '--superlink', '127.0.0.1:19300', '--port', '19390'],
                                        stdout=f, stderr=subprocess.STDOUT, env={**os.environ, 'FLWR_HOME': home, 'PATH': f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"})
        assert stranger.wait(timeout=240) != 0 and 'Failed to activate SuperNode' in log.read_text(), log.read_text()[-2000:]
        wait_until(lambda: (out / 'checkpoint.pt').exists(), p)           # round 1 done (with both clients: no failure recorded)
        os.kill(pids[1], signal.SIGKILL)                             # the SuperNode of client 0 dies mid-run
        so, se = p.communicate(timeout=600)
    finally:
        if p.poll() is None: p.send_signal(signal.SIGTERM); p.wait(60)
    assert p.returncode == 0, (p.returncode, so, se)
    s = json.loads((out / 'summary.json').read_text())
    rows = history_rows(out)
    assert [(int(r['round']), int(r['clients_asked']), int(r['clients_answered'])) for r in rows] == [(2, 2, 1)], rows
    assert s['client_failures'] and all(f['client'] == 0 and '1' not in f['what'] for f in s['client_failures']), s['client_failures']
    assert s['pm_clients'] == 1 and json.loads(so.strip().splitlines()[-1])['backend'] == 'flower-deployment'
    assert not alive_in(home), 'processes left behind'
