"""Scale benchmark: peak memory and seconds per round against the number of clients, for a fixed cohort.

For each model (the CNN, ResNet-18) and method (SCAFFOLD, Ditto, FedLoGe: each keeps a per-client private state:
the control variate c_i, the personal model v_k, the local head phi_k) and each number of clients N (10, 100, 1000),
one run of the local engine in a fresh process: a cohort of 10 clients a round (frac = 10 / N), tiny synthetic data
(`--per_client` images per client, IID), `--rounds` rounds, one evaluation and one checkpoint at the end (GM on the
global test set, PM over every client's local test set). The child process reports its peak resident memory
(`getrusage` ru_maxrss) and the engine's training seconds per round (`summary.json`'s `sec_per_round`: local work and
aggregation, no evaluation), wall-clock and CPU (`cpu_sec_per_round`: one torch thread, far less sensitive to other jobs
sharing the machine than wall time). Each child runs under an address-space cap (`--cap_gb`, `RLIMIT_AS`), so a run whose
memory grows with N fails with MemoryError and is reported as such instead of taking the machine down.

The table prints, per model and method, the ratios to N = 10 measured in this one run: the goal is peak memory at
N = 1000 within 1.25x of N = 10, and round time independent of N.

    OMP_NUM_THREADS=1 python scripts/bench_scale.py --out results/scale/after.csv
    OMP_NUM_THREADS=1 PYTHONPATH=/path/to/older/checkout python scripts/bench_scale.py --out results/scale/before.csv

Uses only the package's public interface (`FedConfig`, `make_fed_data`, `run_fl`), so the same script measures an older
checkout (put it first on PYTHONPATH).
"""
import argparse, csv, io, json, os, resource, subprocess, sys, tempfile, time
from pathlib import Path


def one(a):
    "Child: one run; prints one JSON line with its peak RSS and seconds per round."
    import torch
    torch.set_num_threads(1)
    import fedloge_nb
    from fedloge_nb.data import make_fed_data
    from fedloge_nb.federated import FedConfig
    from fedloge_nb.engine import run_fl
    N, C = a.clients, 10
    img, ch = (16, 3) if a.model.startswith('resnet') else (28, 1)
    cfg = FedConfig(method=a.method, dataset='synthetic', imb_factor=1.0, partition='iid', clients=N, frac=min(1.0, a.cohort / N),
                    model=a.model, rounds=a.rounds, local_epochs=1, batch_size=a.per_client, lr=0.01, momentum=0.5, seed=0,
                    device=a.device, eval_every=a.rounds, ckpt_every=a.rounds)
    fed = make_fed_data(**{**cfg.data_args(), 'dataset_kwargs': dict(n_train=a.per_client * N // C, n_test=20, img_size=img, channels=ch)})
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        res = run_fl(cfg, fed=fed, out=Path(d) / 'run', progress=False)
        wall = time.perf_counter() - t0
        ckpt_mb = sum(p.stat().st_size for p in (Path(d) / 'run').rglob('*.pt')) / 2**20
    s = res.summary
    print(json.dumps({'peak_rss_mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 'rss_after_data_mb': rss0,
                      'sec_per_round': s['sec_per_round'], 'cpu_sec_per_round': s.get('cpu_sec_per_round'), 'run_wall_s': wall, 'checkpoint_files_mb': ckpt_mb,
                      'gm_acc': s.get('gm_acc'), 'package': str(Path(fedloge_nb.__file__).parent.parent)}))


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--models', default='cnn,resnet18'); p.add_argument('--methods', default='scaffold,ditto,fedloge')
    p.add_argument('--clients', default='10,100,1000'); p.add_argument('--cohort', type=int, default=10)
    p.add_argument('--rounds', type=int, default=5); p.add_argument('--per_client', type=int, default=10)
    p.add_argument('--device', default='cpu'); p.add_argument('--cap_gb', type=float, default=12.0)
    p.add_argument('--out', default=None, help='CSV of the table (written atomically)')
    p.add_argument('--one', action='store_true', help=argparse.SUPPRESS); p.add_argument('--method'); p.add_argument('--model')
    a = p.parse_args()
    if a.one: a.clients = int(a.clients); return one(a)
    cap = int(a.cap_gb * 2**30)
    def limit(): resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    rows = []
    print(f"cohort {a.cohort}, {a.rounds} rounds, {a.per_client} images a client, device {a.device}, "
          f"torch threads 1, cap {a.cap_gb:g} GB a run", flush=True)
    for model in a.models.split(','):
        for method in a.methods.split(','):
            for n in [int(x) for x in a.clients.split(',')]:
                cmd = [sys.executable, __file__, '--one', '--method', method, '--model', model, '--clients', str(n),
                       '--cohort', str(a.cohort), '--rounds', str(a.rounds), '--per_client', str(a.per_client), '--device', a.device]
                t0 = time.perf_counter()
                r = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=limit, env={**os.environ, 'OMP_NUM_THREADS': '1'})
                row = {'model': model, 'method': method, 'clients': n, 'process_s': round(time.perf_counter() - t0, 1)}
                try: row.update(json.loads(r.stdout.strip().splitlines()[-1])); row['status'] = 'ok'
                except (IndexError, json.JSONDecodeError):
                    err = (r.stderr.strip().splitlines() or ['?'])[-1]
                    row['status'] = 'MemoryError (over the cap)' if 'MemoryError' in r.stderr or 'alloc' in r.stderr.lower() else f'failed: {err[:120]}'
                rows.append(row)
                print(f"{model:9s} {method:9s} N={n:5d}  peak RSS {row.get('peak_rss_mb', float('nan')):8.0f} MB  "
                      f"{row.get('sec_per_round', float('nan')):7.3f} s/round  {row.get('cpu_sec_per_round') or float('nan'):7.3f} CPU s/round  {row['status']}", flush=True)
    print("\nratios to N = 10 (goal: peak RSS at N = 1000 <= 1.25x, round time flat)")
    for model in a.models.split(','):
        for method in a.methods.split(','):
            rs = {r['clients']: r for r in rows if r['model'] == model and r['method'] == method}
            base = rs.get(min(rs)) if rs else None
            if not base or base['status'] != 'ok': continue
            parts = [f"N={n}: RSS {r['peak_rss_mb'] / base['peak_rss_mb']:.2f}x, s/round {r['sec_per_round'] / base['sec_per_round']:.2f}x, "
                     f"CPU s/round {(r.get('cpu_sec_per_round') or float('nan')) / (base.get('cpu_sec_per_round') or float('nan')):.2f}x"
                     if r['status'] == 'ok' else f"N={n}: {r['status']}" for n, r in sorted(rs.items()) if n != min(rs)]
            print(f"{model:9s} {method:9s} " + '; '.join(parts))
    if a.out:
        keys = list(dict.fromkeys(k for r in rows for k in r))
        buf = io.StringIO(); w = csv.DictWriter(buf, keys); w.writeheader(); w.writerows(rows)
        out = Path(a.out); out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + '.tmp'); tmp.write_text(buf.getvalue()); os.replace(tmp, out)


if __name__ == '__main__':
    main()
