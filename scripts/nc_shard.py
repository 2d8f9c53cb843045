"""FedAvg vs FedAvg+ETF vs FedAvg+ETF+GMV (seed 001, Tables 1/2/4) on Fashion-MNIST in a "k classes per client" split.

`fedloge_nb compare` has no --classes_per_client flag, so this script calls the Python API (`run_fl`) with
`partition='shard'` and writes the same files as `compare` (table.md, results.csv, curves.png, one folder per run).
Finished runs (summary.json with the same config) are skipped when rerun with the same --out.

Default setting (seed 001's C10-100-2 on FMNIST): balanced FMNIST (IF=1) capped at 2000 train images per class,
100 clients, 2 classes per client (each class split over 20 clients: 100 images per class per client),
10% of the clients per round; standard optimisation of this repo (100 rounds, 1 local epoch, batch 64, lr 0.05,
momentum 0.5).

    OMP_NUM_THREADS=1 python scripts/nc_shard.py --out results/nc_methods/fmnist_shard2 --seeds 0,1,2
"""
from __future__ import annotations
import argparse, json, shutil
from pathlib import Path
from fedloge_nb.federated import FedConfig, run_fl, save_csv, atomic_write
from fedloge_nb.cli import results_table, plot_curves, _read_history
from fedloge_nb.data import make_fed_data

# (label, method, hp)
VARIANTS = {
    'fedavg': ('fedavg', {}),
    'fedavg_etf': ('fedavg_etf', {}),
    'fedavg_etf_gmv': ('fedavg_etf_gmv', {}),                                   # a=0.5, warmup=50
    'fedavg_etf_gmv_a1_w80': ('fedavg_etf_gmv', {'a': 1.0, 'warmup': 80}),
    'fedprox': ('fedprox', {}),
    'fedprox_etf_gmv': ('fedprox_etf_gmv', {}),
}

def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--variants', default='fedavg,fedavg_etf,fedavg_etf_gmv', help=f"comma-separated, from {list(VARIANTS)}")
    p.add_argument('--seeds', default='0,1,2')
    p.add_argument('--dataset', default='fmnist'); p.add_argument('--imb_factor', type=float, default=1.0)
    p.add_argument('--max_per_class', type=int, default=2000)
    p.add_argument('--clients', type=int, default=100); p.add_argument('--classes_per_client', type=int, default=2)
    p.add_argument('--frac', type=float, default=0.1); p.add_argument('--rounds', type=int, default=100)
    p.add_argument('--local_epochs', type=int, default=1); p.add_argument('--batch_size', type=int, default=64)
    p.add_argument('--lr', type=float, default=0.05); p.add_argument('--momentum', type=float, default=0.5)
    p.add_argument('--weight_decay', type=float, default=0.0); p.add_argument('--model', default='cnn')
    p.add_argument('--eval_every', type=int, default=10); p.add_argument('--device', default='auto')
    p.add_argument('--out', default='runs/nc_shard')
    a = p.parse_args()
    names = [v.strip() for v in a.variants.split(',') if v.strip()]
    for v in names:
        if v not in VARIANTS: raise SystemExit(f"unknown variant {v!r}; known: {list(VARIANTS)}")
    seeds = [int(s) for s in a.seeds.split(',') if s.strip()]
    out = Path(a.out); rows, hists = [], {}
    base = dict(dataset=a.dataset, imb_factor=a.imb_factor, max_per_class=a.max_per_class, clients=a.clients,
                partition='shard', classes_per_client=a.classes_per_client, frac=a.frac, rounds=a.rounds,
                local_epochs=a.local_epochs, batch_size=a.batch_size, lr=a.lr, momentum=a.momentum,
                weight_decay=a.weight_decay, model=a.model, eval_every=a.eval_every, device=a.device)
    for seed in seeds:
        fed = None
        for v in names:
            method, hp = VARIANTS[v]
            cfg = FedConfig(method=method, seed=seed, hp=dict(hp), **base).validate()
            rdir = out/f'{v}_seed{seed}'
            done = rdir/'summary.json'
            if done.exists() and json.loads(done.read_text()).get('config') == cfg.key():
                summary = json.loads(done.read_text())
            else:
                if fed is None: fed = make_fed_data(**cfg.data_args())
                if (rdir/'config.json').exists(): shutil.rmtree(rdir)
                summary = run_fl(cfg, fed, out=rdir, progress=False).summary
            print(v, seed, round(summary['gm_acc'], 2), flush=True)
            rows.append({**{k: x for k, x in summary.items() if not isinstance(x, (list, dict))}, 'method': v, 'base_method': method})
            hists.setdefault(v, []).append(_read_history(rdir/'history.csv'))
    table = results_table(rows)
    setting = (f"{a.dataset} IF={a.imb_factor:g} (max {a.max_per_class}/class), shard split: {a.clients} clients x "
               f"{a.classes_per_client} classes, frac={a.frac:g}, {a.rounds} rounds x {a.local_epochs} local epoch(s), "
               f"batch {a.batch_size}, lr {a.lr:g}, momentum {a.momentum:g}, model {a.model}, seeds {seeds}")
    save_csv(out/'results.csv', rows)
    atomic_write(out/'table.md', f"{setting}\n\n{table}\n")
    plot_curves(hists, out/'curves.png', keys=('gm_acc',))
    print(setting); print(table)

if __name__ == '__main__':
    main()
