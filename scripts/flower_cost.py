"""Cost of the Flower simulation beside the local engine, measured in one process: wall and CPU seconds per round, per process.

The standard FMNIST-LT setting (IF=100, alpha=0.5, CNN, 20 clients, frac 0.5, 1 local epoch, batch 64), a few rounds:
each method runs on the local engine (one process, one torch thread), then all of them in ONE Flower simulation (Ray
starts once, `--workers` actors). Around every phase of the Flower run (Ray start-up, discovery, each training round,
each evaluation, the post-training stages) the script samples, from /proc (psutil), the CPU seconds (user + system) of
each thread of this process (the ServerApp thread; the rest: Flower's simulation threads and Ray's client) and of every
process Ray started (each actor; Ray's own processes), and it counts the messages to the actors and the bytes of their
records (arrays, config and metric records, the node's context state) both ways. The local engine's CPU seconds per
round are those of its process during `_train_round`.

Wall seconds are measured here and depend on the machine's load. The "expected wall on an idle machine" columns are
DERIVED from the CPU seconds, not measured: the local engine is one thread, so its expected wall is its CPU time; a
Flower round is expected to take max(CPU of all processes / cores, CPU of the ServerApp thread + CPU of the busiest
actor) seconds (the cores shared by every process; the server's work before and after the exchange does not overlap
the clients', and one actor runs its clients one after the other). Waiting (sleeps between polls) costs no CPU and is
not in the derived columns. Two biases of a busy machine make the derived Flower walls pessimistic, and the report
measures both: CPU seconds grow when more of our processes compete with the machine's other jobs (measured by running
the local engine alone, before and after the Flower run, and in two processes side by side, as the two actors run),
and the busiest actor takes more clients when the other jobs slow the other actor down (shown by the same estimate
with the actors' CPU seconds split evenly). GM/PM of both engines are compared for identity. Before measuring, one throw-away SGD step
makes torch import what its first optimiser step imports (torch._dynamo), so that the local engine's first round does
not carry a once-per-process import. Writes OUT/cost.json and OUT/cost.md (`--stem`: another name).

    OMP_NUM_THREADS=1 python scripts/flower_cost.py --rounds 3 --workers 2 --out results/flower
"""
import argparse, collections, datetime, json, math, os, platform, shlex, subprocess, sys, tempfile, threading, time
from pathlib import Path
import psutil, torch
import fedloge_nb.federated as F
try: import fedloge_nb.engine as E
except ModuleNotFoundError: E = F                          # a checkout before the round loop had its own chapter
try: import fedloge_nb.flower_simulation as FL
except ModuleNotFoundError: import fedloge_nb.flower as FL     # a checkout before the Flower chapter was split (the 'before' runs)
from fedloge_nb.federated import FedConfig
from fedloge_nb.datasets import atomic_write
from fedloge_nb.engine import run_fl
from fedloge_nb.guards import save_json
from fedloge_nb.data import make_fed_data

ME = psutil.Process()


def kind(p) -> str:
    "A process Ray started, by kind: 'actor' (a ClientAppActor), 'ray worker' (an idle Ray worker), 'ray system' (the rest)."
    try: cmd = ' '.join(p.cmdline())
    except psutil.Error: return 'gone'
    if 'ClientAppActor' in cmd: return 'actor'
    return 'ray worker' if 'ray::' in cmd or 'default_worker.py' in cmd else 'ray system'


def snap() -> dict:
    "CPU seconds so far: {('server', 'ServerApp thread' | 'other threads'), (kind, pid)} for this process's threads and every child process."
    names, out = {t.native_id: t.name for t in threading.enumerate()}, collections.Counter()
    for t in ME.threads():
        out[('server', 'ServerApp thread' if 'server_th' in names.get(t.id, '') else 'other threads')] += t.user_time + t.system_time
    for c in ME.children(recursive=True):
        try: ct = c.cpu_times(); out[(kind(c), c.pid)] += ct.user + ct.system
        except psutil.Error: pass
    return out


def record_bytes(rd) -> int:
    "Payload bytes of a Flower RecordDict: array data, config and metric values (str / bytes: their length, numbers: 8), keys."
    n = 0
    for rec in (rd.values() if rd is not None else []):
        for k, v in rec.items():
            n += len(k) + (len(v.data) if hasattr(v, 'data') else len(v) if isinstance(v, (str, bytes)) else
                           8 * len(v) if isinstance(v, list) else 8)
    return n


LOCK, TRAFFIC = threading.Lock(), collections.Counter()    # messages to the actors and record bytes, this run so far


def count_traffic():
    "Wrap the Ray backend's `process_message` (this process's side of every message to an actor) to count messages and bytes."
    from flwr.server.superlink.fleet.vce.backend.raybackend import RayBackend
    real = RayBackend.process_message
    def process_message(self, message, context):
        sent = record_bytes(message.content) + record_bytes(context.state)
        out, ctx = real(self, message, context)
        back = (record_bytes(out.content) if out.has_content() else 0) + record_bytes(ctx.state)
        with LOCK: TRAFFIC.update({'messages': 1, 'bytes to actors': sent, 'bytes from actors': back})
        return out, ctx
    RayBackend.process_message = process_message


PHASES = []   # {'method', 'phase', 'wall', 'cpu': {key: s}, 'traffic': {...}}


def phase(name_of):
    "Wrap an EngineStrategy method (or a module function with `name_of(None, args)`) to record wall, CPU and traffic deltas."
    def wrap(f):
        def g(*a, **k):
            s0, t0, n0 = snap(), time.perf_counter(), dict(TRAFFIC)
            try: return f(*a, **k)
            finally:
                s1 = snap()
                PHASES.append({'method': getattr(getattr(a[0], 'cfg', None), 'method', ''), 'phase': name_of(a),
                               'wall': time.perf_counter() - t0, 'cpu': {x: s1[x] - s0.get(x, 0.0) for x in s1},
                               'traffic': {x: TRAFFIC[x] - n0.get(x, 0) for x in TRAFFIC}})
        return g
    return wrap


def summarise(rows: list, cores: int) -> dict:
    "Per-row means of a list of phase records: wall, CPU by kind of process, busiest actor, derived idle walls (and with the actors' work split evenly), traffic."
    n, by, busiest, idle, even = len(rows), collections.Counter(), 0.0, 0.0, 0.0
    for r in rows:
        mine, actors = collections.Counter(), collections.Counter()
        for (k, who), v in r['cpu'].items():
            mine['ServerApp thread' if who == 'ServerApp thread' else 'other driver threads' if k == 'server' else k] += v
            if k == 'actor': actors[who] += v
        top = max(actors.values(), default=0.0)
        by.update(mine); busiest += top
        idle += max(sum(mine.values()) / cores, mine['ServerApp thread'] + top)     # this occurrence's derived idle wall
        even += max(sum(mine.values()) / cores, mine['ServerApp thread'] + mine['actor'] / max(len(actors), 1))
    total = sum(by.values())
    traffic = collections.Counter()
    for r in rows: traffic.update(r['traffic'])
    return {'n': n, 'wall_s': sum(r['wall'] for r in rows) / max(n, 1), 'cpu_s': total / max(n, 1),
            'cpu_by_kind_s': {k: round(v / max(n, 1), 4) for k, v in sorted(by.items())},
            'busiest_actor_cpu_s': busiest / max(n, 1), 'expected_idle_wall_s': idle / max(n, 1), 'expected_idle_wall_even_split_s': even / max(n, 1),
            'traffic': {k: v / max(n, 1) for k, v in traffic.items()}}


def local_runs(cfgs, fed) -> dict:
    "Each config on the local engine in this process: {method: (summary, CPU seconds of this process per training round)}."
    cpu, real = collections.defaultdict(list), E._train_round
    def timed(*args, **kw):
        c0 = time.process_time(); r = real(*args, **kw); cpu[args[1].method].append(time.process_time() - c0); return r
    E._train_round = timed
    try: return {c.method: (run_fl(c, fed, progress=False).summary, sum(cpu[c.method]) / len(cpu[c.method])) for c in cfgs}
    finally: E._train_round = real


def paired(argv: list) -> list:
    "The local engine's CPU s/round in two processes of this script side by side (`--local_only`): what two busy processes cost each other here."
    ps = [subprocess.Popen([sys.executable, __file__, *argv, '--local_only', 'true'], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    return [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in ps]


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--methods', default='fedavg,fedloge'); p.add_argument('--rounds', type=int, default=3)
    p.add_argument('--workers', type=int, default=2); p.add_argument('--seed', type=int, default=0)
    p.add_argument('--cores', type=int, default=2, help='cores of the idle machine the expected walls are derived for')
    p.add_argument('--title', default='', help='a line on top of cost.md (what was measured)')
    p.add_argument('--out', default='results/flower'); p.add_argument('--stem', default='cost', help='the files are OUT/STEM.json and OUT/STEM.md')
    p.add_argument('--local_only', default='false', help='true: only the local engine, print {method: CPU s/round} (the side-by-side runs)')
    a = p.parse_args()
    load0, date = os.getloadavg(), datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')
    methods = a.methods.split(',')
    cfgs = [FedConfig(method=m, dataset='fmnist', imb_factor=100, alpha=0.5, clients=20, frac=0.5, model='cnn', rounds=a.rounds,
                      local_epochs=1, batch_size=64, lr=0.05, seed=a.seed, device='cpu', eval_every=a.rounds) for m in methods]
    fed = make_fed_data(**cfgs[0].data_args())
    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.0).step()      # torch's once-per-process import of a first step
    if a.local_only == 'true': print(json.dumps({m: cpu for m, (_, cpu) in local_runs(cfgs, fed).items()})); return
    before, rows = local_runs(cfgs, fed), {}
    trace = Path(tempfile.mkdtemp(prefix='flower_cost_'))/'trace.tsv'
    os.environ['FEDLOGE_NB_TRACE'] = str(trace)                     # the actors inherit it: client-side builds are marked there
    count_traffic()
    S = FL.EngineStrategy
    S.discover = phase(lambda a: 'discovery')(S.discover)
    S.train_round = phase(lambda a: 'round 1' if a[2] == 1 else 'later rounds')(S.train_round)
    S.evaluate = phase(lambda a: 'final evaluation' if 'final' in a[4] else 'evaluation')(S.evaluate)
    S.finish = phase(lambda a: 'post-training')(S.finish)
    FL._start_ray = phase(lambda a: 'Ray start-up')(FL._start_ray)
    t0 = time.perf_counter()
    fl = FL.run_flower(cfgs, fed, workers=a.workers, progress=False)
    wall = time.perf_counter() - t0
    after = local_runs(cfgs, fed)                                   # the local engine again: the machine's load drifts
    pair = paired(['--methods', a.methods, '--rounds', str(a.rounds), '--seed', str(a.seed)])
    for c in cfgs:
        (s, c0), c1 = before[c.method], after[c.method][1]
        cpu = (c0 + c1) / 2
        rows[c.method] = {'local': {'wall_s_per_round': s['sec_per_round'], 'cpu_s_per_round': round(cpu, 4), 'cpu_s_per_round_before_after': [round(c0, 4), round(c1, 4)],
                                    'cpu_s_per_round_side_by_side': [round(x[c.method], 4) for x in pair],
                                    'expected_idle_wall_s_per_round': round(cpu, 4), 'finish_time_s': s['finish_time_s'],
                                    'gm_acc': s['gm_acc'], 'pm_acc': s['pm_acc']}}
    builds = [l.split('\t', 1)[1] for l in trace.read_text().splitlines()] if trace.exists() else []
    prof = {}
    for c, s in zip(cfgs, fl):
        r = rows[c.method]
        per = {ph: summarise([x for x in PHASES if x['method'] == c.method and x['phase'] == ph], a.cores)
               for ph in ('discovery', 'round 1', 'later rounds', 'evaluation', 'post-training', 'final evaluation')}
        prof[c.method] = per
        rr = summarise([x for x in PHASES if x['method'] == c.method and 'round' in x['phase']], a.cores)
        r['flower'] = {'wall_s_per_round': s['sec_per_round'], 'cpu_s_per_round': round(rr['cpu_s'], 4),
                       'cpu_by_kind_s_per_round': rr['cpu_by_kind_s'], 'busiest_actor_cpu_s_per_round': round(rr['busiest_actor_cpu_s'], 4),
                       'expected_idle_wall_s_per_round': round(rr['expected_idle_wall_s'], 4), 'traffic_per_round': rr['traffic'],
                       'expected_idle_wall_even_split_s_per_round': round(rr['expected_idle_wall_even_split_s'], 4),
                       'finish_time_s': s['finish_time_s'], 'gm_acc': s['gm_acc'], 'pm_acc': s['pm_acc']}
        r['measured_speedup'] = round(r['local']['wall_s_per_round'] / s['sec_per_round'], 2)
        r['expected_idle_speedup'] = round(r['local']['expected_idle_wall_s_per_round'] / rr['expected_idle_wall_s'], 2)
        r['identical_gm_pm'] = all(r['local'][k] == s[k] or (math.isnan(r['local'][k]) and math.isnan(s[k])) for k in ('gm_acc', 'pm_acc'))
    ray_start = summarise([x for x in PHASES if x['phase'] == 'Ray start-up'], a.cores)
    load1 = os.getloadavg()
    res = {'command': 'OMP_NUM_THREADS=1 python ' + shlex.join(sys.argv), 'title': a.title, 'date': date, 'setting': cfgs[0].key() | {'method': methods},
           'flower_workers': a.workers, 'cores_assumed_idle': a.cores, 'flower_wall_s_all_methods': round(wall, 2),
           'torch_threads': torch.get_num_threads(), 'nice': os.nice(0),
           'machine': f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
           'load_average_before': [round(x, 2) for x in load0], 'load_average_after': [round(x, 2) for x in load1],
           'client_side_builds': builds, 'ray_start_up': ray_start, 'methods': rows, 'profile': prof}
    out = Path(a.out); out.mkdir(parents=True, exist_ok=True)
    save_json(out/f'{a.stem}.json', res)
    md = report(res, a.cores)
    atomic_write(out/f'{a.stem}.md', md)
    print(md)


def report(res: dict, cores: int) -> str:
    "cost.md: the per-round table, the profile by phase and kind of process, traffic, builds, command, date and load."
    rows, L = res['methods'], []
    if res['title']: L += [res['title'], '']
    L += [f"Per training round (mean over {res['setting']['rounds']} rounds; evaluation excluded). Wall: measured on this machine under the load "
          f"below. CPU: user + system seconds of every process involved (local engine: the mean of a run before and a run after the Flower "
          f"run, the load drifts). Expected idle wall: DERIVED from the CPU seconds for an idle {cores}-core machine (local engine: its CPU "
          f"time; Flower: max(all CPU / {cores}, ServerApp thread + busiest actor)), not measured.", '',
          '| method | local wall s | local CPU s | local expected idle s | Flower wall s | Flower CPU s (all processes) | Flower busiest actor CPU s | '
          'Flower expected idle s | speed-up measured here | speed-up expected idle | GM/PM identical |', '|---|' + '---:|' * 9 + '---|']
    for m, r in rows.items():
        lo, fl = r['local'], r['flower']
        L.append(f"| {m} | {lo['wall_s_per_round']:.3f} | {lo['cpu_s_per_round']:.3f} | {lo['expected_idle_wall_s_per_round']:.3f} | "
                 f"{fl['wall_s_per_round']:.3f} | {fl['cpu_s_per_round']:.3f} | {fl['busiest_actor_cpu_s_per_round']:.3f} | "
                 f"{fl['expected_idle_wall_s_per_round']:.3f} | x{r['measured_speedup']} | x{r['expected_idle_speedup']} | {r['identical_gm_pm']} |")
    L += ['', 'Flower profile: CPU seconds by kind of process, per occurrence of each phase (later rounds: per round), with the traffic to and from the '
          'actors (record payload bytes: arrays, config and metric records, the node context\'s state).', '',
          '| method | phase | n | wall s (here) | CPU s all | ServerApp thread | other driver threads | actors | busiest actor | Ray system + idle workers | '
          'expected idle s | messages | KB to actors | KB from actors |', '|---|---|' + '---:|' * 12]
    rs = res['ray_start_up']
    L.append(f"| all | Ray start-up | {rs['n']} | {rs['wall_s']:.2f} | {rs['cpu_s']:.2f} | - | {rs['cpu_by_kind_s'].get('other driver threads', 0):.2f} | - | - | "
             f"{rs['cpu_by_kind_s'].get('ray system', 0) + rs['cpu_by_kind_s'].get('ray worker', 0):.2f} | - | - | - | - |")
    for m, per in res['profile'].items():
        for ph, s in per.items():
            if not s['n']: continue
            k, t = s['cpu_by_kind_s'], s['traffic']
            L.append(f"| {m} | {ph} | {s['n']} | {s['wall_s']:.3f} | {s['cpu_s']:.3f} | {k.get('ServerApp thread', 0):.3f} | {k.get('other driver threads', 0):.3f} | "
                     f"{k.get('actor', 0):.3f} | {s['busiest_actor_cpu_s']:.3f} | {k.get('ray system', 0) + k.get('ray worker', 0):.3f} | "
                     f"{s['expected_idle_wall_s']:.3f} | {t.get('messages', 0):.0f} | {t.get('bytes to actors', 0) / 1e3:.0f} | {t.get('bytes from actors', 0) / 1e3:.0f} |")
    b = res['client_side_builds']
    L += ['', 'Contention on this machine: the local engine\'s CPU s/round alone (before / after the Flower run) and in two processes '
          'side by side (as the two actors run): ' + '; '.join(
              f"{m} {r['local']['cpu_s_per_round_before_after'][0]:.3f} / {r['local']['cpu_s_per_round_before_after'][1]:.3f} alone, "
              f"{r['local']['cpu_s_per_round_side_by_side'][0]:.3f} / {r['local']['cpu_s_per_round_side_by_side'][1]:.3f} side by side "
              f"({100 * (sum(r['local']['cpu_s_per_round_side_by_side']) / sum(r['local']['cpu_s_per_round_before_after']) - 1):+.0f}%)"
              for m, r in rows.items()) + '. The actors\' CPU seconds carry that inflation and the local engine\'s alone do not, so the '
          'derived Flower walls are pessimistic by about as much; with the Flower CPU seconds divided by that factor, the expected idle '
          'speed-up would be ' + ', '.join(f"{m} x{r['expected_idle_speedup'] * sum(r['local']['cpu_s_per_round_side_by_side']) / sum(r['local']['cpu_s_per_round_before_after']):.2f}"
                                           for m, r in rows.items()) + ' (an estimate on top of an estimate: the table keeps the uncorrected one). '
          'Likewise the busiest actor did more of the work here partly because the other jobs slowed the other actor down (each '
          'takes the next message when it is free); with the actors\' CPU seconds split evenly, the expected idle speed-up would be ' +
          ', '.join(f"{m} x{r['local']['expected_idle_wall_s_per_round'] / r['flower']['expected_idle_wall_even_split_s_per_round']:.2f}" for m, r in rows.items()) + '.', f"Client-side builds in the actors (data, method): {len(b)} marked" + (': ' + '; '.join(b) if b else
          ' (this version of the package marks none in the trace)') + '.',
          f"Local engine, post-training stage: " + ', '.join(f"{m} {r['local']['finish_time_s']:.2f} s" for m, r in rows.items()) +
          "; Flower: " + ', '.join(f"{m} {r['flower']['finish_time_s']:.2f} s" for m, r in rows.items()) + " (wall, here).",
          f"Flower simulation wall time for all methods (Ray start-up and shut-down included): {res['flower_wall_s_all_methods']:.1f} s.", '',
          f"Command: `{res['command']}`", '',
          f"Date: {res['date']}; {res['machine']}; this job at nice {res['nice']}, {res['torch_threads']} torch thread; load average "
          f"{' / '.join(f'{x:.2f}' for x in res['load_average_before'])} (1 / 5 / 15 min) before, "
          f"{' / '.join(f'{x:.2f}' for x in res['load_average_after'])} after (other jobs on the machine included)."]
    return '\n'.join(L) + '\n'


if __name__ == '__main__': main()
