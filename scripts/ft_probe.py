"""FedAvg-FT's finetuning, client by client: what whole-model finetuning at the run's lr does to each client (chapter 08a).

Trains FedAvg-FT from a cell's config.json exactly as the cell ran (same seed, same numbers), and at the finetuning
stage records for every client the local-test accuracy of: the global model (no finetuning), the finetuning as run
(the method, unchanged), the same finetuning with the last, smaller batch of each epoch skipped (`drop_last`; a client of n samples
gets a batch of n mod batch_size at the end of every epoch; 1 sample where n = 64 j + 1), and the same finetuning at
lr 0.01. Also the largest batch loss seen while finetuning. Nothing in the method changes: the probe is a subclass
whose `finish_client` calls FedAvg-FT's and then runs the variants on copies, with the seed the method uses.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/ft_probe.py \
        results/sweeps/leaderboard_local/fmnist_if100_a0.5_fedavg_ft_s0/config.json results/ft_probe/local_s0.csv

With `--scan SWEEP [SWEEP ...] OUT.csv` it trains nothing: for every committed FedAvg-FT cell of the leaderboards named
and the FedAvg cell of the same seed (the same global model), it writes each client's accuracy before and after the
finetuning and the size of its last batch (the split is rebuilt from the cell's config).

    OMP_NUM_THREADS=1 .venv/bin/python scripts/ft_probe.py --scan leaderboard_if100 leaderboard_if10 leaderboard_local \
        results/ft_probe/leaderboard_clients.csv
"""
import copy, dataclasses, json, sys
from pathlib import Path
import pandas as pd
import torch
import torch.nn.functional as F
from fedloge_nb.federated import FedConfig, local_sgd, derive_seed
from fedloge_nb.baselines_lt import FedAvgFT
from fedloge_nb.engine import run_fl
from fedloge_nb.registry import matched_hp
from fedloge_nb.datasets import atomic_write


def _acc(m, d) -> float:
    "Local test accuracy in eval mode (the mode restored after: `self.local`'s tensors are the method's state)."
    was = m.training; m.eval()
    try:
        with torch.no_grad(): return float((m(d.x_test).argmax(1) == d.y_test).float().mean() * 100)
    finally: m.train(was)


class ProbedFedAvgFT(FedAvgFT):
    "FedAvg-FT, unchanged, with each client's finetuning compared against two variants on copies of the global model."
    def __init__(self, **hp): super().__init__(**hp); self.rows = []

    def finish_client(self, stage, d, cs, cfg, msg):
        glob = copy.deepcopy(self.net); seed = derive_seed(cfg.seed, 'ft', d.k); E = self.hp['ft_epochs']
        peak = []
        def lf(mm, xb, yb):
            l = F.cross_entropy(mm(xb), yb); peak.append(l.item()); return l
        m = copy.deepcopy(glob); local_sgd(m, d, cfg, seed, lf, epochs=E, lr=self.hp['ft_lr'])
        out = super().finish_client(stage, d, cs, cfg, msg)
        as_run = _acc(self.local, d)
        if abs(as_run - _acc(m, d)) > 1e-9: raise RuntimeError('the probe does not reproduce the method: stop and read the code')
        skip = copy.deepcopy(glob)                                     # the same finetuning, each epoch's smaller last batch skipped
        local_sgd(skip, dataclasses.replace(d, drop_last=True), cfg, seed, lambda mm, xb, yb: F.cross_entropy(mm(xb), yb), epochs=E, lr=self.hp['ft_lr'])
        low = copy.deepcopy(glob); local_sgd(low, d, cfg, seed, lambda mm, xb, yb: F.cross_entropy(mm(xb), yb), epochs=E, lr=0.01)
        self.rows.append(dict(client=d.k, n_train=len(d), last_batch=len(d) % cfg.batch_size or cfg.batch_size,
                              acc_global=_acc(glob, d), acc_ft=as_run, acc_ft_skip_last=_acc(skip, d), acc_ft_lr0_01=_acc(low, d),
                              max_batch_loss_ft=max(peak)))
        return out


def scan(sweeps, out):
    "Per client of every committed FedAvg-FT leaderboard cell: accuracy of the global model (the FedAvg cell) and after finetuning, last batch size."
    from fedloge_nb.data import make_fed_data
    rows = []
    for sw in sweeps:
        for ft in sorted(Path('results/sweeps', sw).glob('*_fedavg_ft_s*/summary.json')):
            seed = ft.parent.name.rsplit('_s', 1)[1]
            base = list(Path('results/sweeps', sw).glob(f'*_fedavg_s{seed}/summary.json'))
            if len(base) != 1: continue
            cfg = FedConfig(**json.loads((ft.parent / 'config.json').read_text())['config'])
            n = [len(q) for q in make_fed_data(**cfg.data_args()).train_idx]
            a, b = (json.loads(f.read_text())['client_acc'] for f in (base[0], ft))
            rows += [dict(sweep=sw, seed=int(seed), client=k, n_train=n[k], last_batch=n[k] % cfg.batch_size or cfg.batch_size,
                          acc_global=a[k], acc_ft=b[k], change=b[k] - a[k]) for k in range(len(a))]
    df = pd.DataFrame(rows); atomic_write(out, df.to_csv(index=False, float_format='%.4f'))
    small = df.last_batch <= 6; bad = df.change < -20
    print(f'{len(df)} client finetunes in {df.groupby(["sweep", "seed"]).ngroups} cells; a drop of more than 20 points: '
          f'{int((bad & small).sum())} of {int(small.sum())} with a last batch of at most 6 samples, {int((bad & ~small).sum())} of {int((~small).sum())} with a larger one')
    print(df[bad].to_string(index=False, float_format=lambda v: f'{v:.1f}'))


if __name__ == '__main__' and sys.argv[1] == '--scan': scan(sys.argv[2:-1], Path(sys.argv[-1]))
elif __name__ == '__main__':
    cfg_path, out = Path(sys.argv[1]), Path(sys.argv[2])
    cfg = FedConfig(**json.loads(cfg_path.read_text())['config'])
    if cfg.method != 'fedavg_ft': raise SystemExit(f'{cfg_path} is a {cfg.method} cell: give a fedavg_ft config.json')
    algo = ProbedFedAvgFT(**{**cfg.hp, **matched_hp(FedAvgFT, cfg)})   # as make_algorithm builds it
    res = run_fl(cfg, progress=False, algo=algo)
    df = pd.DataFrame(algo.rows).sort_values('client')
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out, df.to_csv(index=False, float_format='%.4f'))
    print(df.to_string(index=False, float_format=lambda v: f'{v:.2f}'))
    print('mean', df[['acc_global', 'acc_ft', 'acc_ft_skip_last', 'acc_ft_lr0_01']].mean().round(2).to_dict(),
          '| run pm_acc', round(res.summary['pm_acc'], 2))
