"""Where the wall time of a Flower deployment on this machine goes: a timeline of `fedloge_nb deploy`'s phases.

Runs one deployment (`fedloge_nb.flower_deploy.run_deployment`: SuperLink, one SuperNode per client, TLS and authenticated
SuperNodes, `flwr run`) with a trace file that the deployment command and the ServerApp append time-stamped lines to
(`trace_mark`), then prints the timeline: start-up (certificates, SuperLink, key registration, ServerApp, SuperNodes),
every message exchange (sent -> all answered), the server's own work between exchanges, and shut-down; and the CPU
seconds of every kind of process, sampled from /proc.

    OMP_NUM_THREADS=1 python scripts/flower_deploy_latency.py --check true --out results/flower/deploy_latency.md
    OMP_NUM_THREADS=1 python scripts/flower_deploy_latency.py --kill true      # SuperNode 0 killed after round 1

Defaults: FedLoGe on FMNIST-LT (IF=100, alpha=0.5, CNN, batch 64, lr 0.05, seed 0), 4 clients = 4 SuperNodes, frac 1.0,
3 rounds. `--check true` also runs the local engine on the same config and compares every GM/PM key. `--kill true`
kills SuperNode 0 (SIGKILL) once round 1 is answered: the next exchange shows how long the server waits before it
counts that client as gone. With a version of the package whose deployment writes no trace (`run_deployment` without
`trace`), only the steps visible from outside are timed (processes started, files written). All timings are of this
one run on this machine, under its load at the time (printed with them)."""
import argparse, datetime, inspect, json, os, platform, shlex, signal, sys, tempfile, threading, time
from pathlib import Path

COMPONENTS = [('flower-superlink', 'SuperLink'), ('a SuperNode of fedloge_nb', 'SuperNodes'), ('flower-supernode', 'SuperNodes'),
              ('serve_clientapps', 'ClientApp runtimes (one warm process per SuperNode)'), ('flwr-clientapp', 'ClientApp processes (one per message)'),
              ('flwr-serverapp', 'ServerApp'), ('flower-superexec', 'SuperExecs'), ('/flwr ', 'flwr CLI (register, run)')]


def _load() -> str:
    la = os.getloadavg()
    return f"load average {la[0]:.2f} / {la[1]:.2f} / {la[2]:.2f} (1 / 5 / 15 min)"


def cpu_sampler(stop: threading.Event, seen: dict, dt: float = 0.1):
    "Every `dt` s: CPU seconds (user + system) so far of every descendant of this process (the deployment's processes)."
    me, tick = os.getpid(), os.sysconf('SC_CLK_TCK')
    while not stop.is_set():
        procs = {}
        for d in Path('/proc').iterdir():
            if not d.name.isdigit(): continue
            try:
                f = (d/'stat').read_text().rsplit(')', 1)[1].split()
                procs[int(d.name)] = (int(f[1]), (int(f[11]) + int(f[12])) / tick, d)
            except OSError: pass
        for pid, (ppid, cpu, d) in procs.items():
            up = ppid
            while up not in (me, 0, 1) and up in procs: up = procs[up][0]
            if up != me or pid == me: continue
            try: cmd = (d/'cmdline').read_bytes().replace(b'\0', b' ').decode(errors='replace')
            except OSError: cmd = ''
            seen[pid] = (cmd or seen.get(pid, ('', 0.0))[0], cpu)        # the last command line (a fork's is its parent's until exec; a zombie's is empty)
        stop.wait(dt)


def cpu_by_component(seen: dict) -> dict:
    "CPU seconds per kind of process (the last sample of each; what a process did after its last sample, or a process shorter than one interval, is missed)."
    out = {}
    for cmd, cpu in seen.values():
        name = next((n for key, n in COMPONENTS if key in cmd), 'other')
        out[name] = out.get(name, 0.0) + cpu
    return dict(sorted(out.items(), key=lambda x: -x[1]))


def outside_marks(F, out: Path, mark, stop: threading.Event):
    "For a deployment without a trace: mark the steps seen from outside (Deployment methods wrapped, run files watched)."
    sl, sn, fl = F.Deployment.start_superlink, F.Deployment.start_supernode, F.Deployment.flwr
    def start_superlink(self): sl(self); mark('SuperLink listening')
    def start_supernode(self, k, *a, **kw): p = sn(self, k, *a, **kw); mark(f'SuperNode {k} key registered, SuperNode started'); return p
    def flwr(self, *a, **kw):
        r = fl(self, *a, **kw)
        if a and a[0] == 'run': mark('job submitted (flwr run returned)')
        return r
    F.Deployment.start_superlink, F.Deployment.start_supernode, F.Deployment.flwr = start_superlink, start_supernode, flwr
    def watch():
        seen = set()
        while not stop.is_set():
            for name, what in (('config.json', 'SuperNodes found (config.json written)'), ('history.csv', 'history.csv written'),
                               ('summary.json', 'ServerApp done (summary.json written)')):
                try: m = (out/name).stat().st_mtime
                except OSError: continue
                if (name, m) not in seen: seen.add((name, m)); mark(what, m)
            stop.wait(0.02)
    threading.Thread(target=watch, daemon=True).start()


def read_trace(path, t0: float) -> list:
    "The trace file's lines as (seconds since t0, what), in time order."
    rows = [l.split('\t', 1) for l in Path(path).read_text().splitlines() if '\t' in l]
    return sorted((float(t) - t0, w.strip()) for t, w in rows)


def timeline_markdown(rows: list) -> str:
    "The timeline as a markdown table: seconds since start, seconds since the previous line, what happened."
    out, prev = ['| t (s) | +s | step |', '|---:|---:|---|'], 0.0
    for t, w in rows:
        out.append(f'| {t:.2f} | {t - prev:.2f} | {w} |'); prev = t
    return '\n'.join(out)


def phases(rows: list) -> tuple:
    "Wall time of each phase (start-up until the SuperNodes are found, the exchanges, the server between them, shut-down) and of each exchange."
    first = lambda end: next(t for t, x in rows if x.startswith(end) or x.endswith(end))
    sent = {x.rsplit(': sent', 1)[0]: t for t, x in rows if ': sent to ' in x}
    done = {x.rsplit(': ', 1)[0]: t for t, x in rows if x.endswith(' answered')}
    ex = {w: done[w] - sent[w] for w in sent if w in done}
    found, end, stopped = first('SuperNodes found'), first('ServerApp done'), first('deployment stopped')
    ph = {'start-up (until the ServerApp has found every SuperNode)': found}
    if ex:
        ph['message exchanges (sent -> every answer back)'] = sum(ex.values())
        ph['server work between exchanges (aggregation, GM evaluation, files)'] = end - found - sum(ex.values())
    else: ph['rounds, evaluations, post-training (not split: no trace)'] = end - found
    ph['end (ServerApp done -> every process stopped)'] = stopped - end
    ph['total'] = stopped
    return ph, ex


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--method', default='fedloge'); ap.add_argument('--dataset', default='fmnist')
    ap.add_argument('--clients', type=int, default=4); ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--frac', type=float, default=1.0); ap.add_argument('--model', default='cnn')
    ap.add_argument('--port', type=int, default=19700); ap.add_argument('--timeout', type=float, default=600.0)
    ap.add_argument('--kill', default='false', help='true: SIGKILL SuperNode 0 once round 1 is answered (needs the trace)')
    ap.add_argument('--check', default='false', help="true: compare GM/PM with the local engine's run of the same config")
    ap.add_argument('--title', default='', help='a line under the heading (e.g. which version of the package ran)')
    ap.add_argument('--out', default=None, help='markdown file for the report (printed anyway)')
    a = ap.parse_args(argv)
    try: import fedloge_nb.flower_deploy as F
    except ModuleNotFoundError: import fedloge_nb.flower as F   # a checkout before the Flower chapter was split (the 'before' runs)
    from fedloge_nb.federated import FedConfig
    cfg = FedConfig(method=a.method, dataset=a.dataset, imb_factor=100, alpha=0.5, clients=a.clients, frac=a.frac, rounds=a.rounds,
                    model=a.model, device='cpu')
    work = Path(tempfile.mkdtemp(prefix='deploy_latency_')); trace, out = work/'trace.tsv', work/'out'
    traced = 'trace' in inspect.signature(F.run_deployment).parameters
    def mark(what, t=None):
        with open(trace, 'a') as f: f.write(f"{time.time() if t is None else t:.3f}\t{what}\n")
    load0, kill, box, stop, seen = _load(), a.kill.lower() == 'true', {}, threading.Event(), {}
    def killer():                                                  # SuperNode 0 dies once round 1 is answered
        answered = lambda: trace.exists() and any(l.endswith('answered') and '\tround 1: ' in l for l in trace.read_text().splitlines())
        while 'dep' not in box or not answered():
            if stop.is_set(): return
            time.sleep(0.05)
        os.kill(box['dep'].nodes[0].pid, signal.SIGKILL); mark('SuperNode 0 killed (SIGKILL)')
    if kill: threading.Thread(target=killer, daemon=True).start()
    if not traced: outside_marks(F, out, mark, stop)
    threading.Thread(target=cpu_sampler, args=(stop, seen), daemon=True).start()
    t0, c0 = time.time(), time.process_time()
    try:
        s = F.run_deployment(cfg, out, port=a.port, timeout=a.timeout, started=lambda dep: box.update(dep=dep), **({'trace': trace} if traced else {}))
        if not traced: mark('deployment stopped')
    finally: stop.set()
    cpu = {'this process (certificates, waiting, sampling)': time.process_time() - c0, **cpu_by_component(seen)}
    rows = read_trace(trace, t0)
    ph, ex = phases(rows)
    cmd = 'OMP_NUM_THREADS=1 python scripts/flower_deploy_latency.py ' + shlex.join(sys.argv[1:] if argv is None else argv)
    lines = [f"## {a.method} on {a.dataset}-LT, {a.clients} SuperNodes, {a.rounds} rounds" + (', SuperNode 0 killed after round 1' if kill else ''), '',
             *([a.title, ''] if a.title else []), f"Command: `{cmd.strip()}`", '',
             f"Date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}; {platform.machine()}, {os.cpu_count()} cores; "
             f"this job at nice {os.nice(0)}; {load0} before, {_load()} after (other jobs on the machine included).", '',
             f"Config: `{json.dumps(cfg.key())}`", '',
             f"GM {s['gm_acc']:.2f}, PM {s['pm_acc']:.2f}; client answers missing: {len(s.get('client_failures', []))}.", '',
             '| phase | wall s |', '|---|---:|', *[f'| {k} | {v:.2f} |' for k, v in ph.items()], '',
             '| process | CPU s (user + system) |', '|---|---:|', *[f'| {k} | {v:.2f} |' for k, v in cpu.items()],
             f'| all | {sum(cpu.values()):.2f} |', '']
    if ex: lines += ['| exchange | wall s (sent -> every answer back) |', '|---|---:|', *[f'| {k} | {v:.2f} |' for k, v in ex.items()], '']
    if a.check.lower() == 'true':
        from fedloge_nb.engine import run_fl
        loc = run_fl(cfg, progress=False).summary
        keys = [k for k in loc if k.startswith(('gm_', 'pm_')) and isinstance(loc[k], float)]
        diff = [k for k in keys if s.get(k) != loc[k]]
        lines += [f"Local engine, same config: {len(keys) - len(diff)} of {len(keys)} GM/PM keys identical" + (f" (differ: {diff})" if diff else '') + '.', '']
    lines += ['Timeline:', '', timeline_markdown(rows)]
    text = '\n'.join(lines) + '\n'
    print(text)
    import shutil; shutil.rmtree(work, ignore_errors=True)          # the job's files (the report holds what counts)
    if a.out: Path(a.out).parent.mkdir(parents=True, exist_ok=True); Path(a.out).write_text(text)


if __name__ == '__main__':
    main()
