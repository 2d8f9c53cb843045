"""FedBABU by its authors' code (jhoon-oh/FedBABU) beside ours, on the same data, model, client sampling and optimiser.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/peers/fedbabu.py theirs FOLDER COMMIT CONFIG.json OUT.json [--rounds N] [--set k=v ...]
    OMP_NUM_THREADS=1 .venv/bin/python scripts/peers/common.py ours CONFIG.json OUT.json --set method=fedbabu
    .venv/bin/python scripts/peers/fedbabu.py table FOLDER OUT.md [--cell CELL_DIR_OF_SEED_0]

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
"""
import argparse, copy, json, os, runpy, sys, tempfile, time
from pathlib import Path
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import check_commit, with_changes, save_theirs, gm_row, write_table as common_table, EVAL_ROUNDS, TensorSet
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
    from scipy import stats
    runs = {}
    for p in sorted(Path(folder).glob('*.json')):
        r = json.loads(p.read_text()); runs.setdefault(r['config']['seed'], {})[r['side']] = r
    seeds = sorted(k for k, v in runs.items() if {'ours', 'theirs'} <= set(v))
    o = runs[seeds[0]]['ours']; c = o['config']
    setting = (f"Setting: the leaderboard's FedAvg cell at {c['dataset']} IF {c['imb_factor']}, Dirichlet alpha {c['alpha']} with the method "
               f"swapped to FedBABU at our hyperparameters for the cell ({', '.join(f'{k} {v}' for k, v in o['hp'].items())}; ft_epochs is the cell's "
               f"post_epochs): {c['clients']} clients, frac {c['frac']}, {c['rounds']} rounds x {c['local_epochs']} local epoch, batch {c['batch_size']}, "
               f"lr {c['lr']} (constant on both sides), momentum {c['momentum']}, weight decay {c['weight_decay']}, val_frac {c.get('val_frac', 0)}.")
    a = np.array([runs[s]['ours']['final_summary']['pm_acc'] for s in seeds]); b = np.array([runs[s]['theirs']['final_pm']['pm_acc'] for s in seeds])
    full = np.array([runs[s]['theirs']['final_pm']['pm_acc_full'] for s in seeds]); d = b - a
    h = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d)) if len(d) > 1 else float('nan')
    extra = ['', "**PM after fine-tuning, compared** (the definitions are the same here, unlike the generic line above, which reads PM from the "
             "last 3 evaluations): each client fine-tunes the final model for ft_epochs on its training data and is tested on its local test set, "
             "the unweighted mean over the clients.", '',
             '| PM (final) | ours | theirs | theirs minus ours [95% CI] | per seed (ours / theirs) |', '|---|---|---|---|---|',
             f"| head fine-tuned (ours' ft_part) | {a.mean():.2f} | {b.mean():.2f} | {d.mean():+.2f} [{d.mean() - h:+.2f}, {d.mean() + h:+.2f}] | "
             f"{'; '.join(f'{x:.2f} / {y:.2f}' for x, y in zip(a, b))} |",
             f"| whole network fine-tuned (their notebook's) | - | {full.mean():.2f} | - | {'; '.join(f'{y:.2f}' for y in full)} |"]
    return common_table(folder, out, method='FedBABU', script='scripts/peers/fedbabu.py', setting=setting, cell_dir=cell_dir, extra_lines=extra)


if __name__ == '__main__':
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    sub = p.add_subparsers(dest='side', required=True)
    t = sub.add_parser('theirs'); t.add_argument('folder'); t.add_argument('commit'); t.add_argument('config'); t.add_argument('out')
    t.add_argument('--rounds', type=int, default=None); t.add_argument('--set', action='append', default=[])
    w = sub.add_parser('table'); w.add_argument('folder'); w.add_argument('out'); w.add_argument('--cell', default=None)
    m = sub.add_parser('ours-plain-mean', help=run_ours_plain_mean.__doc__); m.add_argument('config'); m.add_argument('out')
    m.add_argument('--rounds', type=int, default=None); m.add_argument('--set', action='append', default=[])
    a = p.parse_args()
    if a.side == 'theirs': run_theirs(a.folder, a.commit, a.config, a.out, a.rounds, a.set)
    elif a.side == 'ours-plain-mean': run_ours_plain_mean(a.config, a.out, a.rounds, a.set)
    else: write_table(a.folder, a.out, a.cell)
