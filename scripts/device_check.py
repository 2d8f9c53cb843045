"""Every registered method, a few rounds on a small Fashion-MNIST-LT, on a device and on the CPU: does it run there, and
do its numbers agree?

For each method: `run_fl` on `--device` and then on the CPU (same seed, same data), with the trained global model's
tensors checked to lie on the device asked for. Prints one row per method (GM and PM on each device, the absolute
differences, seconds on each) and writes the table to `--out` (CSV). Exit status 1 if any method raised or left its
model elsewhere. On a CUDA GPU the numbers need not equal the CPU's bit for bit (other kernels, other summation
order); three rounds on 300 images per class keep the gap small. With `--device cpu` both runs are the CPU's and
must be equal (a determinism check).

    OMP_NUM_THREADS=1 python scripts/device_check.py --device cuda [--methods fedavg,fedloge] [--out device_check.csv]
    OMP_NUM_THREADS=1 python scripts/device_check.py --device cpu --dataset digits --model mlp   # seconds, no GPU
"""
import argparse, csv, dataclasses, sys, time, traceback
import torch
from fedloge_nb.data import make_fed_data
from fedloge_nb.federated import FedConfig, METHODS
from fedloge_nb.registry import load_methods
from fedloge_nb.engine import run_fl

p = argparse.ArgumentParser()
p.add_argument('--device', default='cuda'); p.add_argument('--methods', default='all')
p.add_argument('--rounds', type=int, default=3); p.add_argument('--out', default='device_check.csv')
p.add_argument('--dataset', default='fmnist'); p.add_argument('--model', default='cnn')
a = p.parse_args()
load_methods()
methods = sorted(METHODS) if a.methods == 'all' else a.methods.split(',')
base = FedConfig(dataset=a.dataset, model=a.model, max_per_class=300, test_max_per_class=100, clients=10, rounds=a.rounds,
                 eval_every=1, seed=0)
fed = make_fed_data(**base.data_args())
rows, bad = [], []
for m in methods:
    row = {'method': m}
    for tag, dev in (('dev', a.device), ('cpu', 'cpu')):
        cfg = dataclasses.replace(base, method=m, device=dev)
        t = time.perf_counter()
        try:
            r = run_fl(cfg, fed, progress=False)
            where = {str(v.device.type) for v in r.algo.net.state_dict().values()}
            if where != {torch.device(dev).type}: bad.append(f"{m}: model on {where}, asked for {dev}")
            row.update({f'gm_{tag}': r.summary.get('gm_acc'), f'pm_{tag}': r.summary.get('pm_acc'),
                        f'sec_{tag}': round(time.perf_counter() - t, 2)})
        except Exception as e:
            bad.append(f"{m} on {dev}: {type(e).__name__}: {e}"); traceback.print_exc()
    for k in ('gm', 'pm'):
        x, y = row.get(f'{k}_dev'), row.get(f'{k}_cpu')
        row[f'{k}_absdiff'] = None if x is None or y is None else round(abs(x - y), 4)
    rows.append(row); print(row, flush=True)
keys = list(dict.fromkeys(k for r in rows for k in r))
with open(a.out, 'w', newline='') as f:
    w = csv.DictWriter(f, keys); w.writeheader(); w.writerows(rows)
print(f"{len(rows)} methods on {a.device} ({torch.cuda.get_device_name() if 'cuda' in a.device else 'cpu'}), torch {torch.__version__}")
for b in bad: print('FAILED', b)
sys.exit(1 if bad else 0)
