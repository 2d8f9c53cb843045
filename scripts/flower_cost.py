"""Cost of the Flower backend, measured in one process side by side with the local engine.

The standard FMNIST-LT setting (IF=100, alpha=0.5, CNN, 20 clients, frac 0.5, 1 local epoch, batch 64), a few rounds:
each method runs on the local engine, then all of them in ONE Flower simulation (Ray starts once). Reports seconds
per round of training (`train_time_s / rounds`, evaluation excluded), the post-training stage, the wall time of
the whole call (Ray start-up and shut-down included) and whether GM/PM are identical. Writes OUT/cost.json and
OUT/cost.md.

    OMP_NUM_THREADS=1 python scripts/flower_cost.py --rounds 3 --workers 2 --out results/flower
"""
import argparse, json, math, os, platform, sys, time
from pathlib import Path
import torch
from fedloge_nb.federated import FedConfig, run_fl, save_json, atomic_write
from fedloge_nb.data import make_fed_data
from fedloge_nb.flower import run_flower

p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
p.add_argument('--methods', default='fedavg,fedloge'); p.add_argument('--rounds', type=int, default=3)
p.add_argument('--workers', type=int, default=2); p.add_argument('--seed', type=int, default=0)
p.add_argument('--out', default='results/flower')
a = p.parse_args()
methods = a.methods.split(',')
cfgs = [FedConfig(method=m, dataset='fmnist', imb_factor=100, alpha=0.5, clients=20, frac=0.5, model='cnn', rounds=a.rounds,
                  local_epochs=1, batch_size=64, lr=0.05, seed=a.seed, device='cpu', eval_every=a.rounds) for m in methods]
fed = make_fed_data(**cfgs[0].data_args())
rows = {}
for c in cfgs:
    t0 = time.perf_counter(); s = run_fl(c, fed, progress=False).summary
    rows[c.method] = {'local': {'sec_per_round': s['sec_per_round'], 'finish_time_s': s['finish_time_s'], 'wall_s': round(time.perf_counter() - t0, 2),
                                'gm_acc': s['gm_acc'], 'pm_acc': s['pm_acc']}}
t0 = time.perf_counter()
fl = run_flower(cfgs, fed, workers=a.workers, progress=False)
wall = time.perf_counter() - t0
for c, s in zip(cfgs, fl):
    r = rows[c.method]
    r['flower'] = {'sec_per_round': s['sec_per_round'], 'finish_time_s': s['finish_time_s'], 'gm_acc': s['gm_acc'], 'pm_acc': s['pm_acc']}
    r['overhead_x'] = round(s['sec_per_round'] / r['local']['sec_per_round'], 2)
    r['identical_gm_pm'] = all(r['local'][k] == s[k] or (math.isnan(r['local'][k]) and math.isnan(s[k])) for k in ('gm_acc', 'pm_acc'))
res = {'command': 'OMP_NUM_THREADS=1 python ' + ' '.join(sys.argv), 'setting': cfgs[0].key() | {'method': methods},
       'flower_workers': a.workers, 'flower_wall_s_all_methods': round(wall, 2), 'torch_threads': torch.get_num_threads(),
       'machine': f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end",
       'methods': rows}
out = Path(a.out); out.mkdir(parents=True, exist_ok=True)
save_json(out / 'cost.json', res)
md = ['| method | local s/round | flower s/round | overhead | local finish s | flower finish s | GM/PM identical |', '|---|---|---|---|---|---|---|']
for m, r in rows.items():
    md.append(f"| {m} | {r['local']['sec_per_round']:.2f} | {r['flower']['sec_per_round']:.2f} | x{r['overhead_x']} | {r['local']['finish_time_s']:.2f} | "
              f"{r['flower']['finish_time_s']:.2f} | {r['identical_gm_pm']} |")
md.append(f"\nFlower simulation wall time for all methods (Ray start-up and shut-down included): {wall:.1f} s; {res['machine']}.\n"
          f"Command: `{res['command']}`")
atomic_write(out / 'cost.md', '\n'.join(md) + '\n')
print('\n'.join(md))
