"""Round-overhead benchmark: one federated round (all clients, 1 local epoch) / one centralised epoch.

Same images (the union of the clients' training sets), same model, same batch size, same optimizer, measured
in one process, alternating, several repeats; prints the median of each and their ratio (target <= 1.15).

    python scripts/bench_round.py [--dataset fmnist] [--model cnn] [--batch_size 32] [--repeats 5]
"""
import argparse, statistics, time
import torch
import torch.nn.functional as F
from fedloge_nb.data import make_fed_data
from fedloge_nb.federated import FedConfig, FedAvg
from fedloge_nb.engine import start_run, _train_round

p = argparse.ArgumentParser()
p.add_argument('--dataset', default='fmnist'); p.add_argument('--model', default='cnn')
p.add_argument('--batch_size', type=int, default=32); p.add_argument('--clients', type=int, default=20)
p.add_argument('--repeats', type=int, default=5); p.add_argument('--threads', type=int, default=2)
a = p.parse_args()
torch.set_num_threads(a.threads)
cfg = FedConfig(dataset=a.dataset, model=a.model, clients=a.clients, frac=1.0, local_epochs=1, batch_size=a.batch_size,
                device='cpu')
fed = make_fed_data(**cfg.data_args())
algo = FedAvg(); clients, states, gstate = start_run(algo, fed, cfg)
n = sum(len(c) for c in clients)
x = torch.cat([c.x for c in clients]); y = torch.cat([c.y for c in clients])

def central_epoch(seed):
    m = algo.local; m.train()
    opt = torch.optim.SGD(m.parameters(), lr=cfg.lr, momentum=cfg.momentum)
    g = torch.Generator().manual_seed(seed); order = torch.randperm(n, generator=g)
    for i in range(0, n, cfg.batch_size):
        idx = order[i:i + cfg.batch_size]
        loss = F.cross_entropy(m(x[idx]), y[idx]); opt.zero_grad(set_to_none=True); loss.backward(); opt.step()

def fed_round(rnd):
    global gstate
    gstate, _, _ = _train_round(algo, cfg, clients, states, gstate, rnd)

central_epoch(0); fed_round(1)   # warm-up
tc, tf = [], []
for r in range(a.repeats):
    t = time.perf_counter(); central_epoch(r); tc.append(time.perf_counter() - t)
    t = time.perf_counter(); fed_round(r + 2); tf.append(time.perf_counter() - t)
mc, mf = statistics.median(tc), statistics.median(tf)
print(f"{a.dataset} {a.model} batch {a.batch_size}: {n} images, {a.clients} clients, {a.threads} threads, {a.repeats} repeats")
print(f"centralised epoch  median {mc:.3f}s ({n / mc:,.0f} img/s)")
print(f"federated round    median {mf:.3f}s ({n / mf:,.0f} img/s)")
print(f"ratio round/epoch  {mf / mc:.3f}   (per repeat: {', '.join(f'{f / c:.3f}' for f, c in zip(tf, tc))}; target <= 1.15)")
