"""FedDyn by its authors' code (alpemreacar/FedDyn) beside ours, on the same data, model, client sampling and optimiser.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/peers/feddyn.py theirs FOLDER COMMIT CONFIG.json OUT.json [--rounds N] [--set k=v ...]
    OMP_NUM_THREADS=1 .venv/bin/python scripts/peers/common.py ours CONFIG.json OUT.json --set method=feddyn
    .venv/bin/python scripts/peers/feddyn.py table FOLDER OUT.md [--cell CELL_DIR_OF_SEED_0]

FOLDER is a checkout of https://github.com/alpemreacar/FedDyn at COMMIT (checked with git; its code is run, never
copied into this repository). CONFIG.json is a leaderboard cell's `config.json`; FedDyn has no cell of its own, so the
comparison uses the FedAvg cell (`results/sweeps/leaderboard_if100/fmnist_if100_a0.5_fedavg_s{k}/config.json`) with
`--set method=feddyn`, and FedDyn's hyperparameters at our defaults (`fedloge_nb.feddyn.FedDyn.hparams`, unless `--set
hp.NAME=...` changes them): both sides are built from `common.with_changes(CONFIG, rounds, sets)`.

`theirs` runs the authors' `utils_methods.train_FedDyn` unmodified (their round loop, their client training
`utils_general.train_feddyn_mdl`: cross-entropy plus `alpha * <theta, -theta^{t-1} + lambda_k>`, the quadratic through
SGD's weight decay `alpha + weight_decay`, their per-client `lambda_k` accumulation, their server
`cld = mean of the active clients + mean over all clients of lambda_k`), with only these replaced at import time:

- data: `data_obj` is a small object with their `DatasetObject`'s fields (`n_client`, `clnt_x`, `clnt_y`, `tst_x`,
  `tst_y`, `name`, `dataset`) holding the package's split (`fedloge_nb.data.make_fed_data` for the cell's data
  arguments: each client's training indices, the balanced global test set as `tst_x`). `dataset` is 'mnist', the name
  under which their `Dataset` passes 1x28x28 tensors through unchanged (no augmentation, as ours for FMNIST). Their
  code downloads and partitions the data itself; the comparison needs the package's split.
- model: `model_func` builds the package's CNN backbone (`make_backbone`, the leaderboard's `cnn`) and a linear
  classifier with bias (`fc3`, as their `client_model` names its last layer), the network ours trains for FedDyn (a
  `Net` with a biased head). `init_model` is drawn after `torch.manual_seed(seed)`, as their example draws it once.
- client sampling: their loop draws the round's clients inline (`np.random.seed(i + rand_seed)`, then
  `np.random.uniform(size=n_clnt) <= act_prob`); `utils_methods.np` is replaced by a view of numpy whose
  `random.uniform` returns 0 for the clients `fedloge_nb.federated.sample_clients(clients, frac, seed, i + 1)` picks and
  1 for the others (everything else is numpy's), so both sides train the same clients every round.
- our hyperparameters, as ours exposes them (their code hard-codes these): `alpha_coef` = `dyn_alpha` (0.01, the value
  of their CIFAR-10 example); `size_scaled` False (ours' default, the paper's single alpha) makes the client use
  `alpha_coef` itself where their loop passes `alpha_coef / weight_list[clnt]` (a wrapper of `train_feddyn_mdl` that
  swaps that one argument; True keeps theirs); `max_norm` 0 (ours' default, no clipping) sets their module constant
  `utils_general.max_norm` (10) to infinity, which makes `clip_grad_norm_` a no-op (a positive value is used as is);
  `eval_model` 'server' (ours' default) evaluates their `cld_model`, the theta^t the clients receive ('mean': their
  `avg_model`, the mean of the active clients' models, which their own log reports).
- the optimiser: their `torch.optim.SGD(..., lr, weight_decay=alpha + weight_decay)` gets the cell's momentum (0.5) as
  its default (torch.optim.SGD is replaced, during their run, by a subclass whose only change is that default), so
  both sides run the same SGD; their weight decay is the cell's (0), lr the cell's (0.05) times their
  `lr_decay_per_round ** i` with the cell's decay (1), batch 64, 1 local epoch, all 100 rounds.
- paths: their code writes models and arrays under `Output/<name>/FedDyn/`; it runs in a temporary directory.

GM (and many/med/few from the package's shot groups) is `common.gm_row` of the evaluated model at rounds 10, 20, ...,
100 (their `save_period` 10 keeps those models). Their own numbers (test accuracy of `avg_model` and `all_model` on the
balanced test set, every round) are kept in the JSON as `their_log`. FedDyn has no personalised model in their code;
ours' PM is the leaderboard's fine-tuning (`post_epochs`), reported but not compared.
"""
import argparse, json, os, sys, tempfile, time, types
from pathlib import Path
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import check_commit, with_changes, save_theirs, gm_row, write_table as common_table, EVAL_ROUNDS, adapter_cli
from fedloge_nb.federated import FedConfig, sample_clients
from fedloge_nb.data import make_fed_data
from fedloge_nb.models import make_backbone
from fedloge_nb.registry import get_method


def our_hp(cfg: FedConfig) -> dict:
    "FedDyn's hyperparameters as ours runs them: its defaults with the config's hp."
    return dict(get_method('feddyn')(**cfg.hp).hp)


def patch_theirs(folder, cfg: FedConfig, fed, hp):
    "Import their code from `folder`; replace the client sampling, the hard-coded hyperparameters ours exposes, SGD's momentum default."
    sys.path.insert(0, str(folder))
    import utils_general as G, utils_methods as UM                       # their modules (top-level imports only)

    class _Random:
        "numpy.random, except that `uniform(size=n)` marks the package's sample of the round seeded last (seed i -> round i + 1)."
        def __init__(self): self.last = None
        def seed(self, s): self.last = int(s); np.random.seed(s)
        def uniform(self, size=None, **kw):
            sel = sample_clients(cfg.clients, cfg.frac, cfg.seed, self.last + 1)
            u = np.ones(size, dtype=float); u[np.asarray(sel, dtype=int)] = 0.0
            return u
        def __getattr__(self, n): return getattr(np.random, n)
    UM.np = types.SimpleNamespace(**{n: getattr(np, n) for n in dir(np) if not n.startswith('__')})
    UM.np.random = _Random()

    G.max_norm = float(hp['max_norm']) if float(hp['max_norm']) > 0 else float('inf')
    orig = UM.train_feddyn_mdl
    def train_feddyn_mdl(model, model_func, alpha_coef, *rest):
        "Their client training; with size_scaled False the client's alpha is the single alpha (not alpha / weight_list[clnt])."
        return orig(model, model_func, alpha_coef if hp['size_scaled'] else float(hp['dyn_alpha']), *rest)
    UM.train_feddyn_mdl = train_feddyn_mdl
    return G, UM


class _SGD(torch.optim.SGD):
    "torch's SGD with the cell's momentum as the default (their code passes lr and weight_decay only)."
    momentum = 0.0
    def __init__(self, params, lr=1e-3, momentum=None, **kw):
        super().__init__(params, lr=lr, momentum=_SGD.momentum if momentum is None else momentum, **kw)


def run_theirs(folder, commit, config, out, rounds=None, sets=()):
    head = check_commit(folder, commit); folder = Path(folder).resolve()
    cfg = with_changes(config, rounds, sets)
    if cfg.method != 'feddyn': sys.exit(f"method {cfg.method!r}: add --set method=feddyn")
    if cfg.lr_schedule != 'exp': sys.exit(f"the lr schedule {cfg.lr_schedule!r}: only 'exp' has their counterpart (lr_decay_per_round)")
    hp = our_hp(cfg)
    fed = make_fed_data(**cfg.data_args())
    G, UM = patch_theirs(folder, cfg, fed, hp)

    class FedLTCNN(torch.nn.Module):
        "The package's CNN backbone and a biased linear classifier (`fc3`, their client_model's last layer)."
        def __init__(self):
            super().__init__()
            self.base = make_backbone(cfg.model, fed.in_channels, fed.img_size)
            self.fc3 = torch.nn.Linear(self.base.feature_dim, fed.num_classes)
        def forward(self, x): return self.fc3(self.base(x))

    x, y = fed.x_train.numpy(), fed.y_train.numpy()
    data_obj = types.SimpleNamespace(
        n_client=cfg.clients, dataset='mnist', name=f'fedlt_{cfg.dataset}_if{cfg.imb_factor}_a{cfg.alpha}_s{cfg.seed}',
        clnt_x=[x[np.asarray(i)] for i in fed.train_idx], clnt_y=[y[np.asarray(i)].reshape(-1, 1).astype('float32') for i in fed.train_idx],
        tst_x=fed.x_test.numpy(), tst_y=fed.y_test.numpy().reshape(-1, 1).astype('float32'))
    torch.manual_seed(cfg.seed)
    model_func = lambda: FedLTCNN()
    init_model = model_func()
    args = dict(act_prob=float(cfg.frac), learning_rate=float(cfg.lr), batch_size=int(cfg.batch_size), epoch=int(cfg.local_epochs),
                com_amount=int(cfg.rounds), print_per=int(cfg.local_epochs), weight_decay=float(cfg.weight_decay), alpha_coef=float(hp['dyn_alpha']),
                save_period=10 if cfg.rounds >= 10 else int(cfg.rounds), lr_decay_per_round=float(cfg.lr_decay), rand_seed=0)
    work = Path(tempfile.mkdtemp(prefix='feddyn_theirs_')); (work/'Output'/data_obj.name).mkdir(parents=True)
    cwd = os.getcwd(); os.chdir(work); _SGD.momentum = float(cfg.momentum); sgd = torch.optim.SGD; torch.optim.SGD = _SGD
    try:
        t0 = time.time()
        sel, _, tst_sel, all_, _, tst_all, cld = UM.train_FedDyn(data_obj=data_obj, model_func=model_func, init_model=init_model, **args)
        dt = time.time() - t0
    finally: os.chdir(cwd); torch.optim.SGD = sgd
    models = cld if hp['eval_model'] == 'server' else sel
    rows = []
    for r in EVAL_ROUNDS(cfg.rounds):
        j = r // args['save_period'] - 1
        rows.append(gm_row(r, models[j], fed, G.device))
    their_log = dict(avg_model_acc=[100 * float(a) for a in tst_sel[:, 1]], all_model_acc=[100 * float(a) for a in tst_all[:, 1]])
    save_theirs(out, repository='https://github.com/alpemreacar/FedDyn', commit=head, cfg=cfg, rows=rows, wall_s=dt,
                arguments=dict(args, momentum=float(cfg.momentum), max_norm=G.max_norm, hp=hp), their_log=their_log,
                evaluated=('cld_model (theta^t)' if hp['eval_model'] == 'server' else 'avg_model (mean of the active clients)'))


def write_table(folder, out, cell_dir=None):
    "The comparison as markdown (`common.write_table`) with FedDyn's setting."
    o = json.loads(next(Path(folder).glob('ours_*.json')).read_text()); c = o['config']
    setting = (f"Setting: the leaderboard's FedAvg cell at {c['dataset']} IF {c['imb_factor']}, Dirichlet alpha {c['alpha']} with the method "
               f"swapped to FedDyn at our default hyperparameters ({', '.join(f'{k} {v}' for k, v in o['hp'].items())}): {c['clients']} clients, "
               f"frac {c['frac']}, {c['rounds']} rounds x {c['local_epochs']} local epoch, batch {c['batch_size']}, lr {c['lr']}, momentum {c['momentum']}, "
               f"weight decay {c['weight_decay']}, val_frac {c.get('val_frac', 0)}.")
    return common_table(folder, out, method='FedDyn', script='scripts/peers/feddyn.py', setting=setting, cell_dir=cell_dir)


if __name__ == '__main__':
    p, sub, t = adapter_cli(__doc__)
    a = p.parse_args()
    if a.side == 'theirs': run_theirs(a.folder, a.commit, a.config, a.out, a.rounds, a.set)
    else: write_table(a.folder, a.out, a.cell)
