"""FedBABU by its authors' code (jhoon-oh/FedBABU) beside ours, on the same data, model, client sampling and optimiser.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/peers/fedbabu.py theirs FOLDER COMMIT CONFIG.json OUT.json [--rounds N] [--set k=v ...]
    OMP_NUM_THREADS=1 .venv/bin/python scripts/peers/common.py ours CONFIG.json OUT.json --set method=fedbabu
    .venv/bin/python scripts/peers/fedbabu.py table FOLDER OUT.md [--cell CELL_DIR_OF_SEED_0]
    OMP_NUM_THREADS=1 .venv/bin/python scripts/peers/fedbabu.py check FOLDER COMMIT CONFIG.json [--client K] [--steps N] [--out JSON]
    OMP_NUM_THREADS=1 .venv/bin/python scripts/peers/fedbabu.py ours-plain-mean CONFIG.json OUT.json --set method=fedbabu

FOLDER is a checkout of https://github.com/jhoon-oh/FedBABU at COMMIT (checked with git; its code is run, never copied
into this repository). CONFIG.json is a leaderboard cell's `config.json`; FedBABU has no cell of its own, so the
comparison uses the FedAvg cell (`results/sweeps/leaderboard_if100/fmnist_if100_a0.5_fedavg_s{k}/config.json`) with
`--set method=fedbabu`, and FedBABU's hyperparameters as ours runs them there (`fedloge_nb.baselines_lt.FedBABU`:
`ft_epochs` = the cell's `post_epochs` (5), `ft_lr` None (the run's lr), `ft_part` 'head'): both sides are built from
`common.with_changes(CONFIG, rounds, sets)`.

`theirs` runs the authors' `main_fed.py` as a script (`runpy.run_path(..., run_name='__main__')`, their arguments in
`sys.argv`, as their `scripts/run_fedbabu.sh` runs FedBABU: `--local_upt_part body --aggr_part body`, with
`--num_users 20 --frac 0.5 --epochs 100 --local_ep 1 --local_bs 64 --lr 0.05 --momentum 0.5 --wd 0 --seed SEED
--gpu -1 --test_freq 10`). Their round loop, `LocalUpdate.train` (SGD over two parameter groups, the head's at lr 0, so
the head stays at its random initialisation), their plain (unweighted) mean of the sampled clients' models and their
broadcast of the body run unmodified, with only these replaced at import time:

- data: `utils.train_utils.get_data` returns the package's long-tailed training pool and balanced test set as
  datasets of tensors, and the package's client training indices and local test sets as `dict_users_train` /
  `dict_users_test` (`fedloge_nb.data.make_fed_data` for the cell's data arguments). Their code downloads
  CIFAR/MNIST through torchvision and splits it into shards itself; the comparison needs the package's split.
- model: `utils.train_utils.get_model` builds the package's CNN backbone as `features` (`make_backbone`, the
  leaderboard's `cnn`) and a biased linear classifier named `linear` (their networks' name, which their code uses to
  tell the head from the body), the network ours trains for FedBABU (a `Net` with a biased head). Their CNN is a
  CIFAR network with BatchNorm.
- client sampling: their loop draws `np.random.choice(range(num_users), m, replace=False)` each round; during their
  run `numpy.random.choice` returns, for that call, `fedloge_nb.federated.sample_clients(clients, frac, seed, round)`
  for rounds 1, 2, ... (any other call goes to numpy's), so both sides train the same clients every round.
- the learning rate: their loop multiplies the lr by 0.1 at rounds epochs/2 and 3 epochs/4; the cell's lr is constant
  (`lr_decay` 1), so a wrapper of `LocalUpdate.train` passes the cell's lr as `body_lr` wherever their loop passes its
  decayed lr (the head's 0 is kept). Nothing else of their training is changed.
- paths: their code writes `./save/...` (the users' split, best model, results CSV); it runs in a temporary directory.

GM (and many/med/few from the package's shot groups) is `common.gm_row` of their broadcast model (the averaged body
with the fixed random head, `net_local_list[0]`; their `net_glob` is not updated without server data) at rounds 10,
20, ..., 100, taken when their loop evaluates (`test_img_local_all`, every `test_freq` = 10 rounds; their own number, the
test-size-weighted mean of the clients' local test accuracies, is kept as `their_log`).

PM is fine-tuning, which their repository does in `analysis.ipynb` ("Initial / Personalized Accuracy": every client
fine-tunes a copy of the trained model on its training data for `personalization_epoch` = 5 epochs with SGD at
`args.lr` and `args.momentum`, then `test_img_local` on its local test set; PM is the unweighted mean over the clients).
A notebook cell cannot be imported, so the same steps are run through their own functions: `LocalUpdate(args,
dataset_train, dict_users_train[k]).train(net, body_lr, head_lr, local_eps=ft_epochs)` (the same SGD, loader and loss
as their cell) and `test_img_local`. With ours' `ft_part` 'head' the body's lr is 0 (`pm_acc`); their notebook
fine-tunes the whole network (body and head at lr), which is kept as `pm_acc_full` in the JSON. Both start from the
final model (their notebook loads `best_model.pt`, the round with the best local test accuracy, a choice on the test
sets that ours does not make). Ours' PM is the same definition (each client's fine-tuned model on its local test set,
unweighted mean over the clients), so the two PMs are compared.

`check` runs one client update and one head fine-tuning through both codes from the same model, in full batches, and
prints the largest differences; `ours-plain-mean` is a diagnostic of ours with one component of theirs, the server's
unweighted mean (their `main_fed.py`; ours, as FedAvg, weights by the clients' sample counts). The table reads both
from `FOLDER/check/` and `FOLDER/diagnostics/` when they are there.
"""
import argparse, copy, json, os, runpy, sys, tempfile, time
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
    "FedBABU's hyperparameters as ours runs them: defaults, the cell's post_epochs (`post_hp`), the config's hp."
    cls = get_method('fedbabu')
    hp = {**(cls.post_hp(cfg.post_epochs) if cfg.post_epochs is not None else {}), **cfg.hp}
    return dict(cls(**hp).hp)


KEPT = {'rows': [], 'their_acc': [], 'evals': 0}


def patch_theirs(folder, cfg: FedConfig, fed):
    "Import their modules from `folder`; replace the data, the model, the client sampling and the lr decay."
    sys.path.insert(0, str(folder))
    import utils.train_utils as TU, models.Update as UP, models.test as TE     # their modules (main_fed.py imports names from them)

    class FedLTCNN(torch.nn.Module):
        "The package's CNN backbone (`features`) and a biased linear head named `linear`, as their networks name it."
        def __init__(self, num_classes):
            super().__init__()
            self.features = make_backbone(cfg.model, fed.in_channels, fed.img_size)
            self.linear = torch.nn.Linear(self.features.feature_dim, num_classes)
        def forward(self, x): return self.linear(self.features(x))
        def extract_features(self, x): return self.features(x)
    TU.get_model = lambda args: FedLTCNN(args.num_classes).to(args.device)

    train, test = TensorSet(fed.x_train, fed.y_train), TensorSet(fed.x_test, fed.y_test)
    TU.get_data = lambda args, env='fed': (train, test, {k: np.asarray(i) for k, i in enumerate(fed.train_idx)},
                                           {k: np.asarray(i) for k, i in enumerate(fed.test_idx)})

    orig_choice = np.random.choice
    calls = {'round': 0}
    def choice(a, size=None, replace=True, p=None):
        "The package's sample for their per-round client draw; anything else: numpy's."
        if isinstance(a, range) and a == range(cfg.clients) and replace is False and p is None:
            calls['round'] += 1; KEPT['sampled'] = calls['round']
            sel = np.asarray(sample_clients(cfg.clients, cfg.frac, cfg.seed, calls['round']), dtype=int)
            if len(sel) != size: sys.exit(f"their m = {size} clients a round, the package samples {len(sel)}")
            return sel
        return orig_choice(a, size, replace, p)
    np.random.choice = choice

    orig_train = UP.LocalUpdate.train
    def train_(self, net, body_lr, head_lr, idx=-1, local_eps=None):
        "Their local training at the cell's (constant) lr where their loop passes its step-decayed one."
        KEPT['args'] = self.args
        return orig_train(self, net, float(cfg.lr) if body_lr > 0 else body_lr, float(cfg.lr) if head_lr > 0 else head_lr, idx, local_eps)
    UP.LocalUpdate.train = train_

    orig_all = TE.test_img_local_all
    def test_img_local_all(net_local_list, args, dataset_test, dict_users_test, return_all=False):
        "Their evaluation of every `test_freq` rounds; GM of the broadcast model taken beside it."
        KEPT['evals'] += 1; r = KEPT['evals'] * args.test_freq; KEPT['nets'] = net_local_list
        if r in EVAL_ROUNDS(cfg.rounds): KEPT['rows'].append(gm_row(r, net_local_list[0], fed, args.device))
        out = orig_all(net_local_list, args, dataset_test, dict_users_test, return_all)
        KEPT['their_acc'].append(float(out[0])); return out
    TE.test_img_local_all = test_img_local_all
    return UP, TE, orig_train, train, test


def fine_tune_pm(UP, TE, orig_train, train, test, fed, args, epochs, lr, part):
    "Their analysis notebook's personalisation through their functions: every client fine-tunes a copy (head, or all) for `epochs`; the unweighted mean of the local test accuracies."
    accs = []
    for k, net in enumerate(KEPT['nets']):
        net = copy.deepcopy(net)
        if epochs > 0:
            orig_train(UP.LocalUpdate(args=args, dataset=train, idxs=np.asarray(fed.train_idx[k])), net,
                       body_lr=lr if part == 'all' else 0.0, head_lr=lr, local_eps=int(epochs))
        accs.append(TE.test_img_local(net, test, args, user_idx=k, idxs=np.asarray(fed.test_idx[k]))[0])
    return float(np.mean(accs)), accs


def run_theirs(folder, commit, config, out, rounds=None, sets=()):
    head = check_commit(folder, commit); folder = Path(folder).resolve()
    cfg = with_changes(config, rounds, sets)
    if cfg.method != 'fedbabu': sys.exit(f"method {cfg.method!r}: add --set method=fedbabu")
    if cfg.lr_decay != 1.0: sys.exit("the adapter keeps the cell's lr constant; the cell's lr_decay must be 1")
    hp = our_hp(cfg)
    fed = make_fed_data(**cfg.data_args())
    if any(len(i) == 0 for i in fed.test_idx): sys.exit("a client without a local test set")
    UP, TE, orig_train, train, test = patch_theirs(folder, cfg, fed)
    work = Path(tempfile.mkdtemp(prefix='fedbabu_theirs_'))
    argv = ['main_fed.py', '--dataset', 'fmnist', '--model', cfg.model, '--num_classes', str(fed.num_classes), '--num_users', str(cfg.clients),
            '--frac', str(cfg.frac), '--epochs', str(cfg.rounds), '--local_ep', str(cfg.local_epochs), '--local_bs', str(cfg.batch_size),
            '--lr', str(cfg.lr), '--momentum', str(cfg.momentum), '--wd', str(cfg.weight_decay), '--seed', str(cfg.seed), '--gpu', '-1',
            '--test_freq', str(10 if cfg.rounds >= 10 else cfg.rounds), '--results_save', 'run1', '--local_upt_part', 'body', '--aggr_part', 'body']
    sys.argv, old_argv = argv, sys.argv
    cwd = os.getcwd(); os.chdir(work)
    try:
        t0 = time.time(); runpy.run_path(str(folder/'main_fed.py'), run_name='__main__'); dt = time.time() - t0
        lr = float(cfg.lr if hp['ft_lr'] is None else hp['ft_lr'])
        t1 = time.time()
        pm, accs = fine_tune_pm(UP, TE, orig_train, train, test, fed, KEPT['args'], hp['ft_epochs'], lr, hp['ft_part'])
        pm_full, accs_full = fine_tune_pm(UP, TE, orig_train, train, test, fed, KEPT['args'], hp['ft_epochs'], lr, 'all')
        dt_ft = time.time() - t1
    finally: os.chdir(cwd); sys.argv = old_argv
    rows = KEPT['rows']
    if KEPT.get('sampled') != cfg.rounds: sys.exit(f"the package's client sample replaced {KEPT.get('sampled')} of their {cfg.rounds} draws")
    if len(rows) != len(EVAL_ROUNDS(cfg.rounds)): sys.exit(f"{len(rows)} evaluations of their model, expected {len(EVAL_ROUNDS(cfg.rounds))}")
    rows[-1]['pm_acc'] = pm                                               # PM exists after training only
    save_theirs(out, repository='https://github.com/jhoon-oh/FedBABU', commit=head, cfg=cfg, rows=rows, wall_s=dt + dt_ft,
                arguments=dict(argv=argv[1:], hp=hp, ft_lr=lr), their_log=dict(local_acc_weighted=KEPT['their_acc']),
                final_pm=dict(pm_acc=pm, client_acc=accs, ft_part=hp['ft_part'], pm_acc_full=pm_full, client_acc_full=accs_full),
                pm_definition=(f"every client fine-tunes the final model ({hp['ft_part']}, {hp['ft_epochs']} epochs, lr {lr}, their LocalUpdate.train) "
                               "and is tested on its local test set (their test_img_local); the unweighted mean over the clients"))


def check(folder, commit, config, client=0, steps=3, sets=(), out=None):
    """One client update and one fine-tuning by both codes from the same model, in full batches (so that the batch
    order, drawn differently by the two codes, does not matter): ours' `FedBABU.client_update` beside their
    `LocalUpdate.train(body_lr=lr, head_lr=0)`, and ours' `finish_client` (ft_part head) beside their
    `LocalUpdate.train(body_lr=0, head_lr=lr, local_eps=ft_epochs)`; then the fine-tuning in the cell's batches, their
    loader given ours' batch order (its `DataLoader` replaced for that call only). Prints the largest differences."""
    import dataclasses
    from fedloge_nb.federated import client_datasets, seed_everything
    head = check_commit(folder, commit); folder = Path(folder).resolve()
    cfg0 = with_changes(config, None, ['method=fedbabu', *sets]); fed = make_fed_data(**cfg0.data_args())
    d = client_datasets(fed)[client]
    cfg = dataclasses.replace(cfg0, batch_size=len(d), local_epochs=int(steps), device='cpu')
    UP, TE, orig_train, train, test = patch_theirs(folder, cfg, fed)
    import utils.train_utils as TU
    hp = our_hp(cfg); ours = get_method('fedbabu')(**hp); seed_everything(cfg.seed); ours.build(fed, cfg)
    g = {k: v.clone() for k, v in ours.net.state_dict().items()}
    to_theirs = lambda sd: {('features.' + k[len('backbone.'):]) if k.startswith('backbone.') else ('linear.' + k[len('head.'):]): v.clone() for k, v in sd.items()}
    args = argparse.Namespace(local_bs=len(d), momentum=float(cfg.momentum), wd=float(cfg.weight_decay), local_ep=int(steps), device=torch.device('cpu'), num_classes=fed.num_classes)
    r = ours.client_update(g, {}, d, cfg, 0); mine = to_theirs({**g, **r.state})
    net = TU.get_model(args); net.load_state_dict(to_theirs(g))
    orig_train(UP.LocalUpdate(args=args, dataset=train, idxs=np.asarray(fed.train_idx[client])), net, body_lr=float(cfg.lr), head_lr=0.0)
    theirs = net.state_dict()
    upd = dict(largest_difference=max((mine[k] - theirs[k]).abs().max().item() for k in theirs),
               largest_change=max((mine[k] - to_theirs(g)[k]).abs().max().item() for k in theirs),
               head_unchanged_ours=all(torch.equal(mine[k], to_theirs(g)[k]) for k in mine if k.startswith('linear.')),
               head_unchanged_theirs=all(torch.equal(theirs[k], to_theirs(g)[k]) for k in theirs if k.startswith('linear.')))
    ft_cfg = dataclasses.replace(cfg, batch_size=len(d))
    ours.load_global({**g, **r.state}); cs, _ = ours.finish_client(0, d, {}, ft_cfg, {})
    mine_ft = to_theirs({**g, **r.state, **{k[3:]: v for k, v in cs.items() if k.startswith('ft.')}})
    net_ft = TU.get_model(args); net_ft.load_state_dict(mine)
    lr = float(cfg.lr if hp['ft_lr'] is None else hp['ft_lr'])
    orig_train(UP.LocalUpdate(args=args, dataset=train, idxs=np.asarray(fed.train_idx[client])), net_ft, body_lr=0.0, head_lr=lr, local_eps=int(hp['ft_epochs']))
    ft = dict(largest_difference=max((mine_ft[k] - net_ft.state_dict()[k]).abs().max().item() for k in mine_ft),
              largest_change=max((mine_ft[k] - mine[k]).abs().max().item() for k in mine_ft))
    # the fine-tuning as both codes run it (batches of the cell's size, ft_epochs), their loader given ours' batch order
    from fedloge_nb.federated import derive_seed
    class OursOrder:
        "Ours' batches (`ClientData.batches`): a permutation per epoch from a generator seeded once."
        def __init__(self, n, bs, seed): self.n, self.bs, self.g = n, bs, torch.Generator().manual_seed(seed)
        def __iter__(self):
            order = torch.randperm(self.n, generator=self.g).tolist()
            return iter([order[i:i + self.bs] for i in range(0, self.n, self.bs)])
        def __len__(self): return -(-self.n // self.bs)
    ours.load_global(mine_global := {**g, **r.state}); cs, _ = ours.finish_client(0, d, {}, cfg0, {})
    mine_mb = to_theirs({**mine_global, **{k[3:]: v for k, v in cs.items() if k.startswith('ft.')}})
    dl = UP.DataLoader
    UP.DataLoader = lambda dataset, batch_size, shuffle: torch.utils.data.DataLoader(dataset, batch_sampler=OursOrder(len(dataset), batch_size, derive_seed(cfg0.seed, 'ft', client)))
    try:
        net_mb = TU.get_model(args); net_mb.load_state_dict(mine); args.local_bs = int(cfg0.batch_size)
        orig_train(UP.LocalUpdate(args=args, dataset=train, idxs=np.asarray(fed.train_idx[client])), net_mb, body_lr=0.0, head_lr=lr, local_eps=int(hp['ft_epochs']))
    finally: UP.DataLoader = dl
    ft_mb = dict(batch_size=int(cfg0.batch_size), largest_difference=max((mine_mb[k] - net_mb.state_dict()[k]).abs().max().item() for k in mine_mb),
                 largest_change=max((mine_mb[k] - mine[k]).abs().max().item() for k in mine_mb))
    res = dict(command='OMP_NUM_THREADS=1 .venv/bin/python ' + ' '.join(sys.argv), commit=head, client=client, samples=len(d), steps=int(steps),
               ft_epochs=int(hp['ft_epochs']), client_update=upd, fine_tuning=ft, fine_tuning_minibatches_same_order=ft_mb)
    if out: Path(out).parent.mkdir(parents=True, exist_ok=True); Path(out).write_text(json.dumps(res, indent=1) + '\n')
    print(json.dumps(res, indent=1))


def ft_repeats(folder, commit, config, model, repeats, out, offset=1000, sets=()):
    """A diagnostic of PM: one trained model (their run's `best_model.pt`, which their `main_fed.py` writes; for seed 0
    its best round is the last) fine-tuned `repeats` times by each code (their `LocalUpdate.train` from torch seeds
    offset + r, ours' `finish_client` with run seeds offset + r), the PM of every draw."""
    import dataclasses
    from fedloge_nb.federated import client_datasets, seed_everything
    from fedloge_nb.evaluation import client_scores
    head = check_commit(folder, commit); folder = Path(folder).resolve()
    cfg = with_changes(config, None, ['method=fedbabu', *sets]); fed = make_fed_data(**cfg.data_args())
    UP, TE, orig_train, train, test = patch_theirs(folder, cfg, fed)
    import utils.train_utils as TU
    args = argparse.Namespace(local_bs=int(cfg.batch_size), momentum=float(cfg.momentum), wd=float(cfg.weight_decay), local_ep=int(cfg.local_epochs),
                              device=torch.device('cpu'), num_classes=fed.num_classes, bs=128, gpu=-1, verbose=False)
    net = TU.get_model(args); net.load_state_dict(torch.load(model)); KEPT['nets'] = [net] * cfg.clients
    hp = our_hp(cfg); lr = float(cfg.lr if hp['ft_lr'] is None else hp['ft_lr'])
    ours = get_method('fedbabu')(**hp); seed_everything(cfg.seed); ours.build(fed, cfg)
    ours.net.load_state_dict({('backbone.' + k[len('features.'):]) if k.startswith('features.') else ('head.' + k[len('linear.'):]): v for k, v in net.state_dict().items()})
    cl = client_datasets(fed); th, ou = [], []
    for r in range(int(repeats)):
        torch.manual_seed(offset + r); th.append(fine_tune_pm(UP, TE, orig_train, train, test, fed, args, hp['ft_epochs'], lr, hp['ft_part'])[0])
        c2 = dataclasses.replace(cfg, seed=offset + r)
        ou.append(100 * float(np.mean([client_scores(ours, d, ours.finish_client(0, d, {}, c2, {})[0])['ft'][0] for d in cl])))
    res = dict(command='OMP_NUM_THREADS=1 .venv/bin/python ' + ' '.join(sys.argv), commit=head, seed=cfg.seed, model=str(model), hp=hp, theirs=th, ours=ou,
               theirs_mean=float(np.mean(th)), theirs_sd=float(np.std(th, ddof=1)), ours_mean=float(np.mean(ou)), ours_sd=float(np.std(ou, ddof=1)))
    Path(out).parent.mkdir(parents=True, exist_ok=True); Path(out).write_text(json.dumps(res, indent=1) + '\n'); print(json.dumps(res, indent=1))


def run_ours_plain_mean(config, out, rounds=None, sets=()):
    "A diagnostic of ours: our engine's FedBABU with one change, the server's plain (unweighted) mean of the round's bodies, as their main_fed.py averages."
    from fedloge_nb.engine import run_fl
    from fedloge_nb.federated import Aggregator, weighted_average
    from common import summarise, ENV, COMMAND
    from fedloge_nb.datasets import atomic_write
    import dataclasses
    cls = get_method('fedbabu')
    class PlainMean(cls):
        def aggregator(self, gstate, weights): return Aggregator(self, gstate, weights)
        def aggregate(self, gstate, results): return weighted_average([r.state for r in results], [1.0] * len(results))
    cfg = dataclasses.replace(with_changes(config, rounds, sets), eval_every=10)
    fed = make_fed_data(**cfg.data_args())
    t0 = time.time(); r = run_fl(cfg, fed, progress=False, algo=PlainMean(**our_hp(cfg))); dt = time.time() - t0
    rows = [dict(round=int(h['round']), gm_acc=h['gm_acc'], gm_many=h['gm_many'], gm_med=h['gm_med'], gm_few=h['gm_few'], pm_acc=h.get('pm_acc'))
            for h in r.history if h.get('gm_acc') is not None]
    res = dict(side='ours_plain_mean', command=COMMAND(), environment=ENV(), config=cfg.key(), hp=dict(r.algo.hp), rounds=cfg.rounds, rows=rows,
               summary=summarise(rows), final_summary={k: r.summary.get(k) for k in ('gm_acc', 'gm_acc_lastk', 'pm_acc')}, wall_s=round(dt, 1))
    Path(out).parent.mkdir(parents=True, exist_ok=True); atomic_write(out, json.dumps(res, indent=1, default=str)); print(json.dumps(res['summary'], indent=1))


def write_table(folder, out, cell_dir=None):
    "The comparison as markdown (`common.write_table`) with FedBABU's setting, and the PM after fine-tuning paired by seed."
    from fedloge_nb.peers import load_pairs
    from fedloge_nb.aggregate import t_halfwidth
    runs = load_pairs(folder); seeds = list(runs)
    o = runs[seeds[0]]['ours']; c = o['config']
    setting = (f"Setting: the leaderboard's FedAvg cell at {c['dataset']} IF {c['imb_factor']}, Dirichlet alpha {c['alpha']} with the method "
               f"swapped to FedBABU at our hyperparameters for the cell ({', '.join(f'{k} {v}' for k, v in o['hp'].items())}; ft_epochs is the cell's "
               f"post_epochs): {c['clients']} clients, frac {c['frac']}, {c['rounds']} rounds x {c['local_epochs']} local epoch, batch {c['batch_size']}, "
               f"lr {c['lr']} (constant on both sides), momentum {c['momentum']}, weight decay {c['weight_decay']}, val_frac {c.get('val_frac', 0)}.")
    a = np.array([runs[s]['ours']['final_summary']['pm_acc'] for s in seeds]); b = np.array([runs[s]['theirs']['final_pm']['pm_acc'] for s in seeds])
    full = np.array([runs[s]['theirs']['final_pm']['pm_acc_full'] for s in seeds]); d = b - a
    h = float(t_halfwidth(d.std(ddof=1), len(d))) if len(d) > 1 else float('nan')
    extra = ['', "**PM after fine-tuning, compared** (the definitions are the same here, unlike the generic line above, which reads PM from the "
             "last 3 evaluations): each client fine-tunes the final model for ft_epochs on its training data and is tested on its local test set, "
             "the unweighted mean over the clients.", '',
             '| PM (final) | ours | theirs | theirs minus ours [95% CI] | per seed (ours / theirs) |', '|---|---|---|---|---|',
             f"| head fine-tuned (ours' ft_part) | {a.mean():.2f} | {b.mean():.2f} | {d.mean():+.2f} [{d.mean() - h:+.2f}, {d.mean() + h:+.2f}] | "
             f"{'; '.join(f'{x:.2f} / {y:.2f}' for x, y in zip(a, b))} |",
             f"| whole network fine-tuned (their notebook's) | - | {full.mean():.2f} | - | {'; '.join(f'{y:.2f}' for y in full)} |"]
    ck = Path(folder)/'check'/'client_update.json'
    if ck.exists():
        c = json.loads(ck.read_text()); u, f = c['client_update'], c['fine_tuning']
        extra += ['', f"One client update and one fine-tuning, numerically (`{c['command']}`): client {c['client']} ({c['samples']} samples), from the "
                  f"same model, in full batches (so that the batch order, drawn differently by the two codes, does not matter). {c['steps']} body "
                  f"steps: the two codes' weights differ by at most {u['largest_difference']:.1e} (the update moves a weight by up to "
                  f"{u['largest_change']:.3f}; the head is unchanged on both sides: {u['head_unchanged_ours'] and u['head_unchanged_theirs']}). "
                  f"{c['ft_epochs']} epochs of head fine-tuning: at most {f['largest_difference']:.1e} apart (a weight moves by up to {f['largest_change']:.3f})."]
        if 'fine_tuning_minibatches_same_order' in c:
            m_ = c['fine_tuning_minibatches_same_order']
            extra += ['', f"The fine-tuning as both runs do it (batches of {m_['batch_size']}, {c['ft_epochs']} epochs), their loader given ours' batch "
                      f"order: the two codes' heads differ by at most {m_['largest_difference']:.1e} (a weight moves by up to {m_['largest_change']:.3f}). "
                      "The two fine-tunings are the same computation; the runs differ in the batch orders they draw."]
    diag = {json.loads(p.read_text())['config']['seed']: json.loads(p.read_text()) for p in sorted((Path(folder)/'diagnostics').glob('ours_plain_mean_s*.json'))}
    ds = [s_ for s_ in seeds if s_ in diag]
    if ds:
        pmn = np.array([diag[s_]['summary']['gm_acc_last3'] for s_ in ds]); th = np.array([runs[s_]['theirs']['summary']['gm_acc_last3'] for s_ in ds])
        ou = np.array([runs[s_]['ours']['summary']['gm_acc_last3'] for s_ in ds]); dd = th - pmn
        hh = float(t_halfwidth(dd.std(ddof=1), len(dd))) if len(dd) > 1 else float('nan')
        pm_d = np.array([diag[s_]['final_summary']['pm_acc'] for s_ in ds])
        extra += ['', "**One component swapped: the server's mean.** Their `main_fed.py` averages the round's bodies with equal weights "
                  "(`w_glob[k] / m`), ours (FedAvg's) by the clients' sample counts. Ours with their plain mean (`scripts/peers/fedbabu.py "
                  "ours-plain-mean`, JSONs in `diagnostics/`), everything else ours:", '',
                  '| seed | GM last 3 ours (weighted) | ours with the plain mean | theirs | PM final ours with the plain mean |', '|---|---|---|---|---|']
        extra += [f"| {s_} | {a_:.2f} | {b_:.2f} | {c_:.2f} | {p_:.2f} |" for s_, a_, b_, c_, p_ in zip(ds, ou, pmn, th, pm_d)]
        extra += ['', f"Theirs minus ours with the plain mean, GM last 3: {dd.mean():+.2f} [{dd.mean() - hh:+.2f}, {dd.mean() + hh:+.2f}] over "
                  f"{len(ds)} seed(s); ours with the plain mean minus ours: {(pmn - ou).mean():+.2f}."]
    for fr in sorted((Path(folder)/'diagnostics'/'ft_repeats').glob('*.json')):
        q = json.loads(fr.read_text()); th_, ou_ = np.array(q['theirs']), np.array(q['ours'])
        run_t = runs.get(q['seed'], {}).get('theirs', {}).get('final_pm', {}).get('pm_acc')
        extra += ['', f"**PM of one model, fine-tuned again and again** (`{q['command']}`): their seed-{q['seed']} trained model fine-tuned "
                  f"{len(th_)} times by each code (ft_part {q['hp']['ft_part']}, {q['hp']['ft_epochs']} epochs; only the batch-order draws change): PM "
                  f"{th_.mean():.2f} (sd {th_.std(ddof=1):.2f}, {th_.min():.2f} to {th_.max():.2f}) by theirs, {ou_.mean():.2f} (sd {ou_.std(ddof=1):.2f}, "
                  f"{ou_.min():.2f} to {ou_.max():.2f}) by ours; their run's own draw on this model was "
                  + (f"{run_t:.2f}, below {int((th_ > run_t).sum())} of these {len(th_)} draws." if run_t is not None else "not recorded.")]
    res = common_table(folder, out, method='FedBABU', script='scripts/peers/fedbabu.py', setting=setting, cell_dir=cell_dir, extra_lines=extra)
    # the generic table reads PM from the last 3 evaluations, which FedBABU's fine-tuned PM does not have: its row and remark point to the comparison below
    text = Path(out).read_text().replace("| PM, each code's own (not comparable, below) |", "| PM (see the fine-tuned PM below) |")
    text = text.replace("The two measure different models, so no difference is given.", "The same definition: compared below.")
    Path(out).write_text(text)
    return res


if __name__ == '__main__':
    p, sub, t = adapter_cli(__doc__)
    m = sub.add_parser('ours-plain-mean', help=run_ours_plain_mean.__doc__); m.add_argument('config'); m.add_argument('out')
    m.add_argument('--rounds', type=int, default=None); m.add_argument('--set', action='append', default=[])
    c = sub.add_parser('check', help=check.__doc__.split('\n')[0]); c.add_argument('folder'); c.add_argument('commit'); c.add_argument('config')
    c.add_argument('--client', type=int, default=0); c.add_argument('--steps', type=int, default=3); c.add_argument('--set', action='append', default=[])
    c.add_argument('--out', default=None, help='also write the result as JSON (the table reads FOLDER/check/client_update.json)')
    f = sub.add_parser('ft-repeats', help=ft_repeats.__doc__.split('\n')[0]); f.add_argument('folder'); f.add_argument('commit'); f.add_argument('config')
    f.add_argument('model'); f.add_argument('repeats', type=int); f.add_argument('out'); f.add_argument('--offset', type=int, default=1000)
    f.add_argument('--set', action='append', default=[])
    a = p.parse_args()
    if a.side == 'ft-repeats': ft_repeats(a.folder, a.commit, a.config, a.model, a.repeats, a.out, a.offset, a.set)
    elif a.side == 'check': check(a.folder, a.commit, a.config, a.client, a.steps, a.set, a.out)
    elif a.side == 'theirs': run_theirs(a.folder, a.commit, a.config, a.out, a.rounds, a.set)
    elif a.side == 'ours-plain-mean': run_ours_plain_mean(a.config, a.out, a.rounds, a.set)
    else: write_table(a.folder, a.out, a.cell)
