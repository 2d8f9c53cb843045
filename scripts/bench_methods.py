"""Training cost per round of several methods, measured in ONE process, interleaved (the Table 5 analog).

Every method is built on the same federated dataset; then, for each repeat, every method trains `--rounds`
rounds in turn (round-robin, so drift of the machine's speed hits all methods alike). Prints the median seconds
per round of each method, its ratio to FedAvg's median, and the per-repeat ratios (the noise). Evaluation and
the after-training stage are excluded (they are one-off costs; see `finish_time_s` in the sweep).

    OMP_NUM_THREADS=1 python scripts/bench_methods.py [--methods fedavg,fedprox,fedrep,fedbabu,fedloge] [--repeats 5]
"""
import argparse, dataclasses, statistics, time
import torch
from fedloge_nb.data import make_fed_data
from fedloge_nb.federated import FedConfig
from fedloge_nb.registry import make_algorithm
from fedloge_nb.engine import start_run, _train_round

p = argparse.ArgumentParser()
p.add_argument('--methods', default='fedavg,fedprox,fedrep,fedbabu,fedloge')
p.add_argument('--dataset', default='fmnist'); p.add_argument('--model', default='cnn')
p.add_argument('--repeats', type=int, default=5); p.add_argument('--rounds', type=int, default=2)
p.add_argument('--threads', type=int, default=1)
a = p.parse_args()
torch.set_num_threads(a.threads)
methods = a.methods.split(',')
if 'fedavg' not in methods: methods = ['fedavg', *methods]
base = FedConfig(dataset=a.dataset, model=a.model, device='cpu')   # standard setting: 20 clients, frac 0.5, batch 64
fed = make_fed_data(**base.data_args())
runs = {}
for m in methods:
    cfg = dataclasses.replace(base, method=m).validate()
    algo = make_algorithm(cfg); clients, states, g = start_run(algo, fed, cfg)
    runs[m] = dict(cfg=cfg, algo=algo, clients=clients, states=states, g=g, rnd=0, t=[])

def train(m, n):
    r = runs[m]; t = time.perf_counter()
    for _ in range(n):
        r['rnd'] += 1
        r['g'], _, _ = _train_round(r['algo'], r['cfg'], r['clients'], r['states'], r['g'], r['rnd'])
    return (time.perf_counter() - t) / n

for m in methods: train(m, 1)                       # warm-up round
for rep in range(a.repeats):
    for m in methods: runs[m]['t'].append(train(m, a.rounds))
med = {m: statistics.median(r['t']) for m, r in runs.items()}
print(f"{a.dataset} {a.model}, {base.clients} clients, frac {base.frac}, batch {base.batch_size}, {a.threads} thread(s); "
      f"{a.repeats} interleaved repeats of {a.rounds} round(s), after 1 warm-up round")
print(f"{'method':<12} {'s/round':>8} {'x FedAvg':>9}   per-repeat ratio to FedAvg")
for m in methods:
    per = ', '.join(f"{t / f:.2f}" for t, f in zip(runs[m]['t'], runs['fedavg']['t']))
    print(f"{m:<12} {med[m]:8.3f} {med[m] / med['fedavg']:9.3f}   {per}")
