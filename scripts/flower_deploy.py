"""Deploy a fedloge_nb run on Flower on this machine: one SuperLink and N SuperNodes as separate processes on 127.0.0.1
(gRPC, insecure: local only), the job submitted with `flwr run flower_app`, the usual run files in --out, and every
process this script started stopped at the end, also when the job fails or the script is interrupted.

    python scripts/flower_deploy.py --method fedloge --clients 3 --rounds 3 --out runs/flower_deploy

Every other `fedloge_nb run` flag that is a FedConfig field can be given as --field value (e.g. --frac 0.6); --hp
takes 'k=v,k=v'. Exit code 0: OUT/summary.json written; 1: the job failed (OUT/error.txt says why)."""
import argparse, json, os, signal, subprocess, sys, tempfile, time
from dataclasses import asdict, fields
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def parse(argv=None):
    from fedloge_nb.federated import FedConfig
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--out', required=True, help='output folder (config.json, history.csv, summary.json; error.txt on failure)')
    p.add_argument('--hp', default='', help="method hyperparameters, e.g. 'sse_steps=200,beta=0.6'")
    p.add_argument('--port', type=int, default=19090, help='first of the local ports used (SuperLink: port, SuperNode k: port+10+k)')
    p.add_argument('--timeout', type=float, default=600.0, help="seconds the ServerApp waits for the clients' replies in one exchange")
    p.add_argument('--job_timeout', type=float, default=1800.0, help='seconds for the whole job before it is declared failed')
    p.add_argument('--keep_logs', action='store_true', help='keep the SuperLink/SuperNode logs (OUT/flower_logs/) after success')
    for f in fields(FedConfig):
        if f.name in ('hp',): continue
        p.add_argument(f'--{f.name}', default=None, help=f'FedConfig.{f.name}')
    a = p.parse_args(argv)
    from fedloge_nb.cli import parse_hp
    base = asdict(FedConfig())
    kw = {}
    for f in fields(FedConfig):
        v = getattr(a, f.name, None)
        if f.name == 'hp' or v is None: continue
        d = base[f.name]
        kw[f.name] = v if isinstance(d, str) else (v.lower() in ('1', 'true', 'yes') if isinstance(d, bool) else
                                                  type(d)(float(v)) if isinstance(d, (int, float)) else (None if v == 'None' else json.loads(v)))
    cfg = FedConfig(**kw, hp=parse_hp(a.hp)).validate()
    return a, cfg


def start(cmd, log, env):
    "A process in its own session (so its children - flwr-serverapp / flwr-clientapp - are stopped with it)."
    return subprocess.Popen(cmd, stdout=open(log, 'w'), stderr=subprocess.STDOUT, env=env, start_new_session=True)


def descendants(home: Path) -> list[int]:
    "Live processes started by this deployment: their environment carries our FLWR_HOME (Flower's own subprocesses start new sessions)."
    tag, out = f'FLWR_HOME={home}'.encode() + b'\0', []
    for d in Path('/proc').iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid(): continue
        try:
            if tag in (d / 'environ').read_bytes() and (d / 'stat').read_text().rsplit(')', 1)[1].split()[0] != 'Z': out.append(int(d.name))
        except OSError: pass
    return out


def stop(procs, home: Path):
    "SIGTERM every process group we started and every process carrying our FLWR_HOME; SIGKILL what is left after 10 s."
    def signal_all(sig):
        for p in procs:
            if p.poll() is None:
                try: os.killpg(p.pid, sig)
                except ProcessLookupError: pass
        for pid in descendants(home):
            try: os.kill(pid, sig)
            except ProcessLookupError: pass
    signal_all(signal.SIGTERM)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 10 and (any(p.poll() is None for p in procs) or descendants(home)): time.sleep(0.2)
    signal_all(signal.SIGKILL)
    for p in procs: p.wait()
    t0 = time.monotonic()
    while descendants(home) and time.monotonic() - t0 < 5: time.sleep(0.2)


def wait_port(port: int, proc, what: str, limit: float = 90.0):
    "Wait until 127.0.0.1:port accepts connections (ValueError when `proc` exits first or after `limit` s)."
    import socket
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if proc.poll() is not None: raise ValueError(f"{what} exited with code {proc.returncode} before listening on port {port}")
        with socket.socket() as s:
            s.settimeout(1)
            if s.connect_ex(('127.0.0.1', port)) == 0: return
        time.sleep(0.5)
    raise ValueError(f"{what} is not listening on port {port} after {limit:.0f} s")


def deploy(a, cfg) -> int:
    out = Path(a.out).absolute(); out.mkdir(parents=True, exist_ok=True)
    for f in ('summary.json', 'error.txt'): (out / f).unlink(missing_ok=True)
    logs = out / 'flower_logs'; logs.mkdir(exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix='flwr_home_'))                  # the flwr CLI's config, not the user's ~/.flwr
    P = a.port
    link = f'127.0.0.1:{P}'                                             # Flower 1.41: one HTTP port for the SuperLink's APIs
    (home / 'config.toml').write_text(f'[superlink]\ndefault = "deploy"\n\n[superlink.deploy]\naddress = "{link}"\ninsecure = true\n')
    env = {**os.environ, 'PATH': f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", 'FLWR_HOME': str(home), 'FLWR_TELEMETRY_ENABLED': '0',
           'PYTHONPATH': os.pathsep.join([str(ROOT)] + [x for x in os.environ.get('PYTHONPATH', '').split(os.pathsep) if x])}
    procs = []
    try:
        procs.append(start([str(BIN / 'flower-superlink'), '--insecure', '--disable-runtime-dependency-installation',
                            '--host', '127.0.0.1', '--port', str(P), '--database', str(home / 'state.db')], logs / 'superlink.log', env))
        try: wait_port(P, procs[0], 'the SuperLink')
        except ValueError as e: print(f"flower_deploy: error: {e}; see {logs}/superlink.log", file=sys.stderr); return 1
        for k in range(cfg.clients):
            procs.append(start([str(BIN / 'flower-supernode'), '--insecure', '--superlink', link, '--port', str(P + 10 + k),
                                '--node-config', f'partition-id={k} num-partitions={cfg.clients}'], logs / f'supernode_{k}.log', env))
        rc = home / 'run_config.toml'
        rc.write_text(f'config = {json.dumps(json.dumps(asdict(cfg)))}\nout = {json.dumps(str(out))}\ntimeout = {float(a.timeout)}\n')
        print(f"flower_deploy: SuperLink {link} + {cfg.clients} SuperNodes (pids {[p.pid for p in procs]}); logs in {logs}; FLWR_HOME={home}", flush=True)
        for k, p in enumerate(procs[1:]):
            try: wait_port(P + 10 + k, p, f'SuperNode {k}')
            except ValueError as e: print(f"flower_deploy: error: {e}; see {logs}/supernode_{k}.log", file=sys.stderr); return 1
        sub = subprocess.run([str(BIN / 'flwr'), 'run', str(ROOT / 'flower_app'), 'deploy', '--run-config', str(rc)],
                             env=env, capture_output=True, text=True, timeout=120)
        (logs / 'flwr_run.log').write_text(sub.stdout + sub.stderr)
        if sub.returncode != 0:
            print(f"flower_deploy: error: flwr run failed ({sub.returncode}):\n{sub.stdout}{sub.stderr}", file=sys.stderr); return 1
        t0 = time.monotonic()
        while time.monotonic() - t0 < a.job_timeout:
            if (out / 'summary.json').exists():
                s = json.loads((out / 'summary.json').read_text())
                print(json.dumps({'method': s['method'], 'out': str(out), 'backend': 'flower-deployment',
                                  **{k: round(s[k], 2) for k in ('gm_acc', 'pm_acc') if s.get(k) is not None}}))
                return 0
            if (out / 'error.txt').exists():
                print(f"flower_deploy: error: the job failed: {(out / 'error.txt').read_text().strip()}", file=sys.stderr); return 1
            dead = [p.pid for p in procs[:1] if p.poll() is not None]
            if dead: print(f"flower_deploy: error: the SuperLink (pid {dead[0]}) exited; see {logs}/superlink.log", file=sys.stderr); return 1
            time.sleep(1)
        print(f"flower_deploy: error: no result within --job_timeout {a.job_timeout} s; see {logs}", file=sys.stderr); return 1
    finally:
        stop(procs, home)
        import shutil; shutil.rmtree(home, ignore_errors=True)


def main(argv=None):
    a, cfg = parse(argv)
    def _term(*_): raise KeyboardInterrupt            # SIGTERM too: the finally of deploy stops every process
    signal.signal(signal.SIGTERM, _term)
    try: code = deploy(a, cfg)
    except KeyboardInterrupt: code = 130
    if code == 0 and not a.keep_logs:
        import shutil; shutil.rmtree(Path(a.out) / 'flower_logs', ignore_errors=True)
    sys.exit(code)


if __name__ == '__main__':
    main()
