"""MOON by its authors' code (QinbinLi/MOON) beside ours, on the same data, model, client sampling and optimiser.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/peers/moon.py theirs FOLDER COMMIT CONFIG.json OUT.json [--rounds N] [--set k=v ...]
    OMP_NUM_THREADS=1 .venv/bin/python scripts/peers/common.py ours CONFIG.json OUT.json --set method=moon
    .venv/bin/python scripts/peers/moon.py table FOLDER OUT.md [--cell CELL_DIR_OF_SEED_0]
    OMP_NUM_THREADS=1 .venv/bin/python scripts/peers/moon.py check FOLDER COMMIT CONFIG.json [--client K] [--steps N] [--out JSON]

FOLDER is a checkout of https://github.com/QinbinLi/MOON at COMMIT (checked with git; its code is run, never copied
into this repository). CONFIG.json is a leaderboard cell's `config.json`; MOON has no cell of its own, so the
comparison uses the FedAvg cell (`results/sweeps/leaderboard_if100/fmnist_if100_a0.5_fedavg_s{k}/config.json`) with
`--set method=moon`, and MOON's hyperparameters at our defaults (`fedloge_nb.optimisers.MOON.hparams`: mu 5,
temperature 0.5, unless `--set hp.NAME=...` changes them): both sides are built from `common.with_changes(CONFIG,
rounds, sets)`.

`theirs` runs the authors' `main.py` as a script (`runpy.run_path(..., run_name='__main__')`, their arguments in
`sys.argv`: `--alg moon --dataset fmnist --n_parties 20 --sample_fraction 0.5 --comm_round 100 --epochs 1
--batch-size 64 --lr 0.05 --mu 5 --temperature 0.5 --reg 0 --model_buffer_size 1 --init_seed SEED`). Their round
loop, `local_train_net`, `train_net_fedcon` (CE + mu * the contrastive CE over [cos(z, z_glob), cos(z, z_prev)] /
temperature), their previous-model pool (FIFO of one, copies of all clients' networks after each round), their
sample-weighted aggregation and their global evaluation run unmodified, with only these replaced at import time:

- data: `utils.partition_data` returns the package's long-tailed training pool, balanced test set and client training
  indices (`fedloge_nb.data.make_fed_data` for the cell's data arguments; their data-statistics log
  `record_net_data_stats` is still called), and `utils.get_dataloader` serves tensors of that pool (a client's indices,
  or all clients' for their global training loader) and the balanced test set, batch sizes as their calls give them.
  Their training loader drops the last, smaller batch (`drop_last=True`); the replacement uses the cell's `drop_last`
  (False), as ours. Their code loads CIFAR/Tiny-ImageNet from disk and partitions it itself.
- model: `ModelFedCon` (their network: `features`, projection `l1`-ReLU-`l2`, classifier `l3`, forward returning
  `(h, projection, logits)`) is replaced by the network ours trains for MOON: the package's CNN backbone as `features`
  (the leaderboard's `cnn`, 84-d ReLU features) and a biased linear classifier `l3` on those features, no projection
  head; forward returns `(h, h, l3(h))`, so their contrastive loss reads the backbone's features, which is what ours
  uses as MOON's representation (our models have no projection head). Their `h.squeeze()` is left out (the backbone
  already gives (B, 84); squeezing would break a batch of one, which their dropped last batch never produced).
- client sampling: their list of each round's parties comes from `random.sample(party_list, n_party_per_round)`, once
  per round before training; `random.sample` returns, for that population, `fedloge_nb.federated.sample_clients(
  clients, frac, seed, round)` for rounds 1, 2, ... (other calls go to Python's own), so both sides train the same
  clients every round.
- the optimiser: their `optim.SGD(..., lr, momentum=0.9, weight_decay=args.reg)` gets the cell's momentum (0.5) in
  place of their hard-coded 0.9 (torch.optim.SGD is replaced, during their run, by a subclass that swaps that one
  argument); `--reg` (their weight decay, default 1e-5) is the cell's (0).
- device and logging: `.cuda()` of modules and tensors is the identity (a CPU run; their `nn.DataParallel` runs the
  module as is without GPUs); their client-side logging evaluations (`compute_accuracy` of a client's network on its
  training data and on the whole test set, before and after its local training, only logged) return NaN without
  running, which keeps a CPU run within minutes; the global model's evaluations run as written. Their log and model
  folders are a temporary directory.

GM (and many/med/few from the package's shot groups) is `common.gm_row` of their global model at rounds 10, 20, ...,
100, taken when their loop evaluates it (their global test-set accuracy of every round is kept as `their_log`).
MOON has no personalised model; ours' PM is the leaderboard's fine-tuning (`post_epochs`), reported but not compared.

`check` runs one client update through both codes (ours' `MOON.client_update`, their `train_net_fedcon` with the
replacements above) from the same global and previous models, in full batches, and prints the largest difference of
the trained weights; the table reads its JSON from `FOLDER/check/client_update.json`.
"""
import argparse, json, os, random, runpy, sys, tempfile, time
from pathlib import Path
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import check_commit, with_changes, save_theirs, gm_row, write_table as common_table, EVAL_ROUNDS, TensorSet, adapter_cli
from fedloge_nb.federated import FedConfig, sample_clients
from fedloge_nb.data import make_fed_data
from fedloge_nb.models import make_backbone
from fedloge_nb.registry import get_method


def our_hp(cfg: FedConfig) -> dict:
    "MOON's hyperparameters as ours runs them: its defaults with the config's hp."
    return dict(get_method('moon')(**cfg.hp).hp)


KEPT = {'rows': [], 'test_acc': [], 'global_evals': 0}


def patch_theirs(folder, cfg: FedConfig, fed):
    "Import their modules from `folder`; replace the data, the model, the client sampling, SGD's momentum, the CUDA calls and the client-side logging evaluations."
    sys.path.insert(0, str(folder))
    torch.nn.Module.cuda = lambda self, *a, **k: self                    # a CPU run
    torch.Tensor.cuda = lambda self, *a, **k: self
    import model as MD, utils as U                                       # their modules (main.py star-imports both)

    class ModelFedCon(torch.nn.Module):
        "The network ours trains for MOON under their names: CNN backbone `features`, biased classifier `l3` on its features, no projection head."
        def __init__(self, base_model, out_dim, n_classes, net_configs=None):
            super().__init__()
            self.features = make_backbone(cfg.model, fed.in_channels, fed.img_size)
            self.l3 = torch.nn.Linear(self.features.feature_dim, n_classes)
        def forward(self, x):
            h = self.features(x)
            return h, h, self.l3(h)
    MD.ModelFedCon = U.ModelFedCon = ModelFedCon

    used = np.sort(np.concatenate([np.asarray(i) for i in fed.train_idx]))
    def partition_data(dataset, datadir, logdir, partition, n_parties, beta=0.4):
        "The package's split: the long-tailed pool, the balanced test set, the client training indices."
        net_dataidx_map = {k: np.asarray(fed.train_idx[k]) for k in range(n_parties)}
        y_train = fed.y_train.numpy()
        return fed.x_train, y_train, fed.x_test, fed.y_test.numpy(), net_dataidx_map, U.record_net_data_stats(y_train, net_dataidx_map, logdir)
    U.partition_data = partition_data

    test_ds = TensorSet(fed.x_test, fed.y_test)
    def get_dataloader(dataset, datadir, train_bs, test_bs, dataidxs=None, noise_level=0):
        "Their loaders over the package's tensors (the cell's drop_last)."
        idx = used if dataidxs is None else np.asarray(dataidxs)
        train_ds = TensorSet(fed.x_train[idx], fed.y_train[idx])
        return (torch.utils.data.DataLoader(train_ds, batch_size=train_bs, drop_last=bool(cfg.drop_last), shuffle=True),
                torch.utils.data.DataLoader(test_ds, batch_size=test_bs, shuffle=False), train_ds, test_ds)
    U.get_dataloader = get_dataloader

    orig_acc = U.compute_accuracy
    def compute_accuracy(model, dataloader, get_confusion_matrix=False, device="cpu", multiloader=False):
        "Theirs for the global model; a client's logging evaluations (its network is wrapped in DataParallel) return NaN."
        if isinstance(model, torch.nn.DataParallel):
            return (float('nan'), None, float('nan')) if get_confusion_matrix else (float('nan'), float('nan'))
        out = orig_acc(model, dataloader, get_confusion_matrix, 'cpu', multiloader)
        if dataloader.dataset is test_ds:                                # the global model on the test set: once a round, after aggregation
            KEPT['global_evals'] += 1; r = KEPT['global_evals']; KEPT['test_acc'].append(100 * out[0])
            if r in EVAL_ROUNDS(cfg.rounds):
                with torch.no_grad(): z = torch.cat([model(fed.x_test[i:i + 1000])[2].float() for i in range(0, len(fed.y_test), 1000)])
                KEPT['rows'].append(gm_row(r, z, fed))
        return out
    U.compute_accuracy = compute_accuracy

    orig_sample = random.sample
    calls = {'round': 0}
    def sample(population, k, *a, **kw):
        "The package's sample for their per-round party lists (population range(clients)); anything else: Python's."
        if list(population) == list(range(cfg.clients)) and k == max(1, int(cfg.clients * cfg.frac)):
            calls['round'] += 1; KEPT['sampled'] = calls['round']
            return [int(c) for c in sample_clients(cfg.clients, cfg.frac, cfg.seed, calls['round'])]
        return orig_sample(population, k, *a, **kw)
    random.sample = sample


class _SGD(torch.optim.SGD):
    "torch's SGD with the cell's momentum in place of the one their code passes."
    momentum = 0.0
    def __init__(self, params, lr=1e-3, momentum=0.0, **kw):
        super().__init__(params, lr=lr, momentum=_SGD.momentum, **kw)


def run_theirs(folder, commit, config, out, rounds=None, sets=()):
    head = check_commit(folder, commit); folder = Path(folder).resolve()
    cfg = with_changes(config, rounds, sets)
    if cfg.method != 'moon': sys.exit(f"method {cfg.method!r}: add --set method=moon")
    if cfg.lr_decay != 1.0: sys.exit("their code has a constant lr; the cell's lr_decay must be 1")
    if int(cfg.clients * cfg.frac) != len(sample_clients(cfg.clients, cfg.frac, cfg.seed, 1)): sys.exit("their party count int(n * frac) differs from the package's")
    hp = our_hp(cfg)
    fed = make_fed_data(**cfg.data_args())
    patch_theirs(folder, cfg, fed)
    work = Path(tempfile.mkdtemp(prefix='moon_theirs_'))
    argv = ['main.py', '--alg', 'moon', '--dataset', 'fmnist', '--model', cfg.model, '--partition', 'noniid', '--beta', str(cfg.alpha),
            '--n_parties', str(cfg.clients), '--sample_fraction', str(cfg.frac), '--comm_round', str(cfg.rounds), '--epochs', str(cfg.local_epochs),
            '--batch-size', str(cfg.batch_size), '--lr', str(cfg.lr), '--optimizer', 'sgd', '--reg', str(cfg.weight_decay),
            '--mu', str(hp['mu']), '--temperature', str(hp['temperature']), '--model_buffer_size', '1', '--init_seed', str(cfg.seed),
            '--device', 'cpu', '--logdir', str(work/'logs') + '/', '--modeldir', str(work/'models') + '/', '--datadir', str(work/'data') + '/',
            '--log_file_name', 'moon']
    sys.argv, old_argv = argv, sys.argv
    cwd = os.getcwd(); os.chdir(work); _SGD.momentum = float(cfg.momentum); sgd = torch.optim.SGD; torch.optim.SGD = _SGD
    try:
        t0 = time.time(); runpy.run_path(str(folder/'main.py'), run_name='__main__'); dt = time.time() - t0
    finally: os.chdir(cwd); torch.optim.SGD = sgd; sys.argv = old_argv
    if KEPT.get('sampled') != cfg.rounds: sys.exit(f"the package's client sample replaced {KEPT.get('sampled')} of their {cfg.rounds} party lists")
    if len(KEPT['rows']) != len(EVAL_ROUNDS(cfg.rounds)): sys.exit(f"{len(KEPT['rows'])} evaluations of their global model, expected {len(EVAL_ROUNDS(cfg.rounds))}")
    save_theirs(out, repository='https://github.com/QinbinLi/MOON', commit=head, cfg=cfg, rows=KEPT['rows'], wall_s=dt,
                arguments=dict(argv=argv[1:], momentum=float(cfg.momentum), hp=hp), their_log=dict(global_test_acc=KEPT['test_acc']))


def check(folder, commit, config, client=0, steps=3, sets=(), out=None):
    """One client update by both codes from the same global and previous models: `steps` full-batch steps (so that the
    batch order, drawn differently by the two codes, does not matter), the cell's lr, momentum and MOON hyperparameters;
    the previous model is the global one plus noise, so that the contrastive term acts. Prints the largest difference."""
    import dataclasses, logging
    from fedloge_nb.federated import client_datasets, seed_everything
    from fedloge_nb.registry import make_algorithm
    check_commit(folder, commit); folder = Path(folder).resolve()
    cfg0 = with_changes(config, None, ['method=moon', *sets]); fed = make_fed_data(**cfg0.data_args())
    d = client_datasets(fed)[client]
    cfg = dataclasses.replace(cfg0, batch_size=len(d), local_epochs=int(steps), device='cpu')
    patch_theirs(folder, cfg, fed)
    import main as MN                                                    # their main.py: its definitions (the script part does not run)
    MN.logger = logging.getLogger()
    ours = make_algorithm(cfg); seed_everything(cfg.seed); ours.build(fed, cfg)
    g = {k: v.clone() for k, v in ours.global_state().items()}
    gen = torch.Generator().manual_seed(1)
    prev = {k[len('backbone.'):]: v + 0.05 * torch.randn(v.shape, generator=gen) for k, v in g.items() if k.startswith('backbone.')}
    r = ours.client_update(g, {f'moon.prev.{k}': v for k, v in prev.items()}, d, cfg, 0)
    to_theirs = lambda sd: {('features.' + k[len('backbone.'):]) if k.startswith('backbone.') else ('l3.' + k[len('head.'):]): v.clone() for k, v in sd.items()}
    net, glob, old = (MN.ModelFedCon(cfg.model, 0, fed.num_classes) for _ in range(3))
    net.load_state_dict(to_theirs(g)); glob.load_state_dict(to_theirs(g))
    old.load_state_dict({**to_theirs(g), **{f'features.{k}': v for k, v in prev.items()}})
    glob.eval().requires_grad_(False); old.eval().requires_grad_(False)
    args = argparse.Namespace(reg=float(cfg.weight_decay))
    dl = torch.utils.data.DataLoader(TensorSet(d.x, d.y), batch_size=len(d), shuffle=True)
    _SGD.momentum = float(cfg.momentum); sgd = torch.optim.SGD; torch.optim.SGD = _SGD
    try: MN.train_net_fedcon(client, net, glob, [old], dl, dl, int(steps), float(cfg.lr), 'sgd', float(ours.hp['mu']), float(ours.hp['temperature']), args, 1, device='cpu')
    finally: torch.optim.SGD = sgd
    mine = to_theirs(r.state); theirs = net.state_dict()
    diff = max((mine[k] - theirs[k]).abs().max().item() for k in theirs)
    moved = max((mine[k] - to_theirs(g)[k]).abs().max().item() for k in theirs)
    ref = ours.client_update(g, {}, d, cfg, 0); no_prev = max((to_theirs(ref.state)[k] - theirs[k]).abs().max().item() for k in theirs)
    res = dict(command='OMP_NUM_THREADS=1 .venv/bin/python ' + ' '.join(sys.argv), commit=check_commit(folder, commit), client=client, samples=len(d),
               steps=int(steps), largest_change_of_a_weight=moved, largest_difference_ours_theirs=diff, largest_difference_if_ours_had_no_previous_model=no_prev)
    if out: Path(out).write_text(json.dumps(res, indent=1) + '\n')
    print(json.dumps(res, indent=1))


def write_table(folder, out, cell_dir=None):
    "The comparison as markdown (`common.write_table`) with MOON's setting."
    o = json.loads(next(Path(folder).glob('ours_*.json')).read_text()); c = o['config']
    setting = (f"Setting: the leaderboard's FedAvg cell at {c['dataset']} IF {c['imb_factor']}, Dirichlet alpha {c['alpha']} with the method "
               f"swapped to MOON at our default hyperparameters ({', '.join(f'{k} {v}' for k, v in o['hp'].items())}): {c['clients']} clients, "
               f"frac {c['frac']}, {c['rounds']} rounds x {c['local_epochs']} local epoch, batch {c['batch_size']}, lr {c['lr']}, momentum {c['momentum']}, "
               f"weight decay {c['weight_decay']}, val_frac {c.get('val_frac', 0)}. Both sides' network: the package's CNN and a linear classifier on its "
               f"84-d features, MOON's representation being those features (no projection head).")
    extra = []
    ck = Path(folder)/'check'/'client_update.json'
    if ck.exists():
        c = json.loads(ck.read_text())
        extra += ['', f"One client update, numerically (`{c['command']}`): client {c['client']} ({c['samples']} samples), {c['steps']} full-batch steps "
                  "from the same global model and a previous model that differs from it (so that the contrastive term acts; full batches, so that "
                  f"the batch order, drawn differently by the two codes, does not matter): the two codes' weights differ by at most "
                  f"{c['largest_difference_ours_theirs']:.1e}, while the update moves a weight by up to {c['largest_change_of_a_weight']:.3f} and "
                  f"ours without the previous model (z_prev = z_glob) ends {c['largest_difference_if_ours_had_no_previous_model']:.3f} away. "
                  "The client update is the same."]
    extra += ['', "What differs outside the client update, and stays (their method's bookkeeping, not replaced): their previous-model pool is "
              "empty in the first round (`--load_first_net` copies the networks but never appends them), so no client has a negative then, "
              "and a client not yet sampled takes as its previous model its own network, initialised independently of the global model "
              "(`init_nets` builds every party's network separately); ours uses the received global model (a contrastive term with zero "
              "gradient) until the client has trained once. The batch orders are drawn differently by the two codes."]
    return common_table(folder, out, method='MOON', script='scripts/peers/moon.py', setting=setting, cell_dir=cell_dir, extra_lines=extra)


if __name__ == '__main__':
    p, sub, t = adapter_cli(__doc__)
    c = sub.add_parser('check', help=check.__doc__.split('\n')[0]); c.add_argument('folder'); c.add_argument('commit'); c.add_argument('config')
    c.add_argument('--client', type=int, default=0); c.add_argument('--steps', type=int, default=3); c.add_argument('--set', action='append', default=[])
    c.add_argument('--out', default=None, help='also write the result as JSON (the table reads FOLDER/check/client_update.json)')
    a = p.parse_args()
    if a.side == 'theirs': run_theirs(a.folder, a.commit, a.config, a.out, a.rounds, a.set)
    elif a.side == 'check': check(a.folder, a.commit, a.config, a.client, a.steps, a.set, a.out)
    else: write_table(a.folder, a.out, a.cell)
