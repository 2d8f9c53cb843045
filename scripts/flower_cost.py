"""What the package's Flower path costs per training round, beside a minimal stock Flower app doing the same training
and beside the local engine, measured in one run of this script on this machine.

The setting: FedAvg on FMNIST-LT (IF=100, alpha=0.5), the CNN, K clients (all of them train and evaluate each round),
1 local epoch, batch 64, lr 0.05, momentum 0.5, seed 0. Five runs, one after the other:

- local: `run_fl` in this process (one torch thread);
- simulation, package: `run_flower` (`fedloge_nb run --backend flower`), W Ray actors;
- simulation, stock: `flwr.simulation.run_simulation` of the app in scripts/flower_stock_app/ (the ClientApp /
  ServerApp of Flower's PyTorch quickstart: `FedAvg` from `flwr.serverapp.strategy`, the same CNN, each client's
  training split and local test set saved from the package's split, a central evaluation on the global test set each
  round), the same backend config;
- deployment, package: `run_deployment` (`fedloge_nb deploy`): a SuperLink, K SuperNodes, `flwr run`, TLS and
  authenticated SuperNodes;
- deployment, stock: the same `Deployment` (same SuperLink, SuperNodes, TLS, keys), `flwr run` of the stock app.

A round is one training exchange with every client, the aggregation, an evaluation exchange with every client and
the server's evaluation on the global test set, in every run. The seconds per round are (end of round R - end of
round 1) / (R - 1): the start-up (Ray, processes, imports, data) is not in them and is reported apart for the
deployments, phase by phase. Ratios are of seconds measured in this one run of this script.

    OMP_NUM_THREADS=1 python scripts/flower_cost.py --clients 4 --rounds 4 --workers 2 --out results/flower/cost_stock
"""
import argparse, datetime, json, os, platform, shlex, subprocess, sys, tempfile, time
from pathlib import Path

HERE = Path(__file__).resolve().parent
STOCK = HERE / 'flower_stock_app'


def marks(path) -> list:
    "(unix time, text) of each line of a trace file."
    if not Path(path).exists(): return []
    return [(float(t), w) for t, w in (l.split('\t', 1) for l in Path(path).read_text().splitlines() if '\t' in l)]


def first(ms, text) -> float:
    "Time of the first mark containing `text`."
    hit = [t for t, w in ms if text in w]
    if not hit: raise SystemExit(f"flower_cost: no trace mark {text!r} in {ms[-5:]}")
    return hit[0]


def first_done(ms, text) -> float:
    "Time of the first mark that starts with `text` and says the exchange was answered (or is the stock app's 'evaluated')."
    hit = [t for t, w in ms if w.startswith(text) and ('answered' in w or 'evaluated' in w)]
    if not hit: raise SystemExit(f"flower_cost: no trace mark {text!r} ... answered in {ms[-5:]}")
    return hit[0]


def per_round(ms, rounds: int, done: str) -> float:
    "(end of round R - end of round 1) / (R - 1), the end of round r being the mark `done.format(r)` that says it was answered."
    return (first_done(ms, done.format(rounds)) - first_done(ms, done.format(1))) / (rounds - 1)


def save_data(fed, folder: Path):
    "Each client's training split and local test set, and the global test set, as tensors for the stock app."
    from fedloge_nb.federated import client_datasets
    folder.mkdir(parents=True, exist_ok=True)
    import torch
    for d in client_datasets(fed):
        torch.save({'x': d.x.contiguous(), 'y': d.y.contiguous(), 'x_test': d.x_test.contiguous(), 'y_test': d.y_test.contiguous()},
                   folder / f'client_{d.k}.pt')
    torch.save({'x': fed.x_test.contiguous(), 'y': fed.y_test.contiguous()}, folder / 'test.pt')


def local(cfg, fed) -> float:
    "Seconds per round of the local engine: (wall of R rounds - wall of 1 round) / (R - 1), after a warm-up run."
    import dataclasses
    from fedloge_nb.engine import run_fl
    one = dataclasses.replace(cfg, rounds=1)
    run_fl(one, fed, progress=False)
    t = time.perf_counter(); run_fl(one, fed, progress=False); t1 = time.perf_counter() - t
    t = time.perf_counter(); s = run_fl(cfg, fed, progress=False); tr = time.perf_counter() - t
    return (tr - t1) / (cfg.rounds - 1), s.summary


def package_simulation(cfg, fed, workers, trace) -> tuple:
    from fedloge_nb.flower import EngineStrategy
    from fedloge_nb.flower_simulation import run_flower
    EngineStrategy.trace = str(trace)                                 # this package's own class: its exchanges leave trace marks
    t0 = time.time()
    s = run_flower(cfg, fed, workers=workers, progress=False)
    EngineStrategy.trace = None
    ms = marks(trace)
    return per_round(ms, cfg.rounds, 'evaluation {}: '), time.time() - t0, s


def stock_config(cfg, fed, data, trace) -> dict:
    "The stock app's run config for the job of `cfg` on `fed`."
    return {'data': str(data), 'num-server-rounds': cfg.rounds, 'clients': cfg.clients, 'model': cfg.model, 'num-classes': fed.num_classes,
            'in-channels': fed.in_channels, 'img-size': fed.img_size, 'lr': cfg.lr, 'momentum': cfg.momentum,
            'local-epochs': cfg.local_epochs, 'batch-size': cfg.batch_size, 'trace': str(trace)}


def stock_simulation(cfg, fed, workers, data, trace) -> tuple:
    "The stock app on `run_simulation` (its run config from the environment: run_simulation takes none)."
    os.environ['STOCK_APP_CONFIG'] = json.dumps(stock_config(cfg, fed, data, trace))
    os.environ['PYTHONPATH'] = os.pathsep.join([str(STOCK)] + [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p])
    sys.path.insert(0, str(STOCK))
    from flwr.simulation import run_simulation
    from stock_app.client_app import app as client_app
    from stock_app.server_app import app as server_app
    backend = {'client_resources': {'num_cpus': 1, 'num_gpus': 0.0},
               'init_args': {'num_cpus': workers, 'num_gpus': 0, 'include_dashboard': False, 'logging_level': 'error', 'log_to_driver': False}}
    t0 = time.time()
    run_simulation(server_app=server_app, client_app=client_app, num_supernodes=cfg.clients, backend_config=backend)
    return per_round(marks(trace), cfg.rounds, 'round {} evaluated'), time.time() - t0


def package_deployment(cfg, port, out, trace) -> tuple:
    from fedloge_nb.flower_deploy import run_deployment
    from fedloge_nb.flower_client import trace_mark
    trace_mark(trace, 'start')
    s = run_deployment(cfg, out, port=port, trace=trace)
    ms = marks(trace)
    t0 = first(ms, 'start')
    phases = {'processes up (SuperLink, keys, SuperNodes)': first(ms, 'SuperNodes started') - t0,
              'first round trained and evaluated': first_done(ms, 'evaluation 1: ') - t0,
              'whole job, stopped': first(ms, 'deployment stopped') - t0}
    return per_round(ms, cfg.rounds, 'evaluation {}: '), phases, s


def stock_deployment(cfg, fed, port, data, trace, logs) -> tuple:
    "The stock app on the same `Deployment`: SuperLink, SuperNodes with keys and TLS, `flwr run`; stopped after round R's evaluation."
    from fedloge_nb.flower_deploy import Deployment
    from fedloge_nb.flower_client import trace_mark
    trace_mark(trace, 'start')
    dep = Deployment(cfg.clients, port, logs)
    try:
        dep.start_superlink()
        rc = dep.home / 'run_config.toml'
        rc.write_text(''.join(f'{k} = {json.dumps(v)}\n' for k, v in stock_config(cfg, fed, data, trace).items()))
        job = dep.flwr('run', STOCK, 'deploy', '--run-config', rc, wait=False)
        dep.start_supernodes(range(cfg.clients)); trace_mark(trace, 'SuperNodes started')
        out = ''.join(job.communicate(timeout=300))
        if job.returncode != 0: raise SystemExit(f"flower_cost: flwr run of the stock app failed: {out[-500:]}")
        t = time.monotonic()
        while not any(f'round {cfg.rounds} evaluated' in w for _, w in marks(trace)):
            if time.monotonic() - t > 1800: raise SystemExit(f"flower_cost: the stock deployment did not finish; see {logs}")
            time.sleep(0.1)
    finally:
        dep.stop(); trace_mark(trace, 'deployment stopped')
    ms = marks(trace)
    t0 = first(ms, 'start')
    phases = {'processes up (SuperLink, keys, SuperNodes)': first(ms, 'SuperNodes started') - t0,
              'first round trained and evaluated': first_done(ms, 'round 1 evaluated') - t0,
              'whole job, stopped': first(ms, 'deployment stopped') - t0}
    return per_round(ms, cfg.rounds, 'round {} evaluated'), phases


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--clients', type=int, default=4)
    ap.add_argument('--rounds', type=int, default=4)
    ap.add_argument('--workers', type=int, default=2)
    ap.add_argument('--port', type=int, default=19700)
    ap.add_argument('--out', default='results/flower/cost_stock', help='writes OUT.md and OUT.json')
    ap.add_argument('--dataset', default='fmnist'); ap.add_argument('--model', default='cnn'); ap.add_argument('--imb_factor', type=float, default=100)
    ap.add_argument('--note', default='', help='a line about the machine at the time (load, what else ran)')
    a = ap.parse_args(argv)
    if a.rounds < 2: ap.error('--rounds: at least 2 (seconds per round are measured between round 1 and round R)')
    from fedloge_nb.federated import FedConfig
    from fedloge_nb.data import make_fed_data
    from fedloge_nb.flower import quiet_flower
    quiet_flower()
    cfg = FedConfig(method='fedavg', dataset=a.dataset, imb_factor=a.imb_factor, alpha=0.5, clients=a.clients, frac=1.0, rounds=a.rounds, model=a.model,
                    batch_size=64, lr=0.05, local_epochs=1, seed=0, eval_every=1, device='cpu').validate()
    fed = make_fed_data(**cfg.data_args())
    tmp = Path(tempfile.mkdtemp(prefix='flower_cost_'))
    save_data(fed, tmp / 'data')
    la0 = os.getloadavg()
    r = {}
    r['local'], loc = local(cfg, fed)
    r['sim_pkg'], r['sim_pkg_total'], sim = package_simulation(cfg, fed, a.workers, tmp / 'sim_pkg.tsv')
    r['sim_stock'], r['sim_stock_total'] = stock_simulation(cfg, fed, a.workers, tmp / 'data', tmp / 'sim_stock.tsv')
    r['dep_pkg'], r['dep_pkg_phases'], dep = package_deployment(cfg, a.port, tmp / 'dep_pkg', tmp / 'dep_pkg.tsv')
    r['dep_stock'], r['dep_stock_phases'] = stock_deployment(cfg, fed, a.port + 50, tmp / 'data', tmp / 'dep_stock.tsv', tmp / 'dep_stock_logs')
    la1 = os.getloadavg()
    same = {k: (loc[k], sim[k], dep[k]) for k in ('gm_acc', 'pm_acc')}
    lines = [f"# Flower cost per training round: this package against a minimal stock Flower app and the local engine",
             '', f"{datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}, {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
             f"load average {la0[0]:.2f} at the start, {la1[0]:.2f} at the end. {a.note}".strip(),
             '', f"FedAvg, {a.dataset} (IF={a.imb_factor:g}, alpha=0.5), {a.model}, {a.clients} clients (all train and evaluate each round), 1 local epoch, batch 64, "
             f"{a.rounds} rounds, {a.workers} Ray actors in the simulations; seconds per round = (end of round {a.rounds} - end of round 1) / {a.rounds - 1}.",
             '', '| run | s / round | package / stock | / local engine |', '|---|---|---|---|',
             f"| local engine (`run_fl`, one thread) | {r['local']:.2f} | | 1.00 |",
             f"| simulation, package (`run_flower`) | {r['sim_pkg']:.2f} | {r['sim_pkg'] / r['sim_stock']:.2f} | {r['sim_pkg'] / r['local']:.2f} |",
             f"| simulation, stock app (`run_simulation`) | {r['sim_stock']:.2f} | | {r['sim_stock'] / r['local']:.2f} |",
             f"| deployment, package (`fedloge_nb deploy`) | {r['dep_pkg']:.2f} | {r['dep_pkg'] / r['dep_stock']:.2f} | {r['dep_pkg'] / r['local']:.2f} |",
             f"| deployment, stock app (same SuperLink / SuperNodes, `flwr run`) | {r['dep_stock']:.2f} | | {r['dep_stock'] / r['local']:.2f} |",
             '', '| deployment phase (s from the start) | package | stock app |', '|---|---|---|']
    lines += [f"| {k} | {r['dep_pkg_phases'][k]:.1f} | {r['dep_stock_phases'][k]:.1f} |" for k in r['dep_pkg_phases']]
    lines += ['', f"Whole simulations (Ray start-up included): package {r['sim_pkg_total']:.1f} s, stock app {r['sim_stock_total']:.1f} s.",
              f"GM / PM accuracy, local / simulation / deployment (the package's runs must agree): " +
              '; '.join(f"{k} {v[0]:.2f} / {v[1]:.2f} / {v[2]:.2f}" for k, v in same.items()),
              '', f"Command: `OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '')} python scripts/flower_cost.py {shlex.join(sys.argv[1:] if argv is None else argv)}`"]
    text = '\n'.join(lines) + '\n'
    print(text)
    out = Path(a.out); out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix('.md').write_text(text)
    out.with_suffix('.json').write_text(json.dumps({**r, 'accuracy': same, 'load': [la0, la1]}, indent=1, default=float))
    if any(len(set(v)) != 1 for v in same.values()): raise SystemExit('flower_cost: the Flower runs differ from the local engine')


if __name__ == '__main__':
    main()
