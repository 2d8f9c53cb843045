"""FedNPC by its authors' code (JintongGao/FedNPC) beside ours, on the same data, model, client sampling and optimiser.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/peers/fednpc.py theirs FOLDER COMMIT CONFIG.json OUT.json [--rounds N] [--set k=v ...]
    OMP_NUM_THREADS=1 .venv/bin/python scripts/peers/common.py ours CONFIG.json OUT.json [--rounds N] [--set k=v ...]
    .venv/bin/python scripts/peers/fednpc.py table FOLDER OUT.md [--cell CELL_DIR_OF_SEED_0]

FOLDER is a checkout of https://github.com/JintongGao/FedNPC at COMMIT (checked with git; its code is run from there,
never copied into this repository). CONFIG.json is a leaderboard cell's `config.json` (e.g.
`results/sweeps/leaderboard_if100/fmnist_if100_a0.5_fednpc_s0/config.json`): its data arguments, seed, rounds,
clients, frac, local epochs, batch size, lr, momentum and FedNPC's stage-2 budget are used by both sides.

`theirs` calls their `FedNPC()` (in `FedAvg-FedNPC.py`, loaded from the checkout by path) unmodified: their seeding,
their stage 1 (FedAvg: `random_state.choice` of the round's clients, a fresh `Local` per client and round, their
`local_train`, `Global.initialize_for_model_fusion`'s sample-weighted mean of every state entry, their evaluation
every round), the stage-1 checkpoint, and their stage 2 (`re_train_classifier`: the classifier alone re-trained with
SGD lr 0.1, momentum 0.9 on a fresh batch of M = 10000 N(0, I) features with uniform labels per epoch, `range(1, E)`
epochs, each evaluated on the test set, the best kept). Replaced at import time, in their module's namespace only:

- data: `datasets.CIFAR10` returns the package's long-tailed training pool (train) and balanced test set (test)
  (`fedloge_nb.data.make_fed_data` for the cell's data arguments, as `TensorSet`s), and `classify_label` /
  `train_long_tail` / `clients_indices` return the package's per-class pool indices and client training indices
  (their own long-tail subsampling and Dirichlet partition would re-split it). Their `local_train` augments every batch with
  `RandomCrop(32, padding=4)` and `RandomHorizontalFlip` (CIFAR's size, applied to a whole batch at once); the package
  applies its dataset's own training augmentation (`fed.augment`: none for FMNIST; 'cifar', a per-image crop and
  flip, for CIFAR), so their `transforms` in the module is a stub whose `Compose` applies `augment_batch(x, fed.augment)`
  (the identity here). Their CIFAR normalisation (`transform_all`) is not used (the package's tensors are normalised).
- model: their `ResNet_cifar` (ResNet-8 for 3x32x32 images) is `FedLTCNN`: the package's CNN backbone
  (`make_backbone`, the cell's `cnn`) under `classifier = nn.Linear(feature_dim, num_classes)` (with a bias, default
  init), whose forward returns `(feature, logits)` as theirs does; both their `Global` and `Local` build it.
- client sampling: their `np.random.RandomState(seed).choice(clients, num_online_clients)` returns the package's
  `sample_clients(clients, frac, seed, round)` (rounds from 1), through a `np` in their module that is numpy except
  for `random.RandomState`.
- arguments: their `args_parser()` (called by `FedNPC()` and by every `Local`) returns the cell's settings:
  20 clients, `num_online_clients` = clients x frac, `num_rounds`, 1 local epoch, batch 64, `lr_local_training` 0.05,
  seed, device cpu, `num_classes` of the data; stage 2 `E` = the cell's stage-2 budget + 1 (their `range(1, E)` runs
  E - 1 epochs; the cell's `--post_epochs 5` sets ours `npc_epochs` = 5, so E = 6; their default E = 28 is run
  too, below), `lr` 0.1 and `M` 10000 (their defaults, ours alike). Their local SGD has no momentum argument
  (`SGD(params, lr=...)`, momentum 0); the cell's momentum (0.5) is ours, so their module's `SGD` is `torch.optim.SGD`
  with the cell's momentum and weight decay (the only use of that name is the local optimiser; stage 2 calls
  `torch.optim.SGD` itself with its momentum 0.9).
- device and paths: `.cuda()` of tensors and modules is the identity (stage 2 calls it unconditionally); the run
  happens in a temporary directory (their log folder and `.pth` files go there).
- their stage 2 returns `None` when no epoch beats the stage-1 model on the test set, and their next line
  (`global_eval(None, ...)`) would raise; `Global.global_eval` here treats `None` as the stage-1 model, which is what
  their choice means then.

Evaluation: their `Global.global_eval` runs unchanged on the balanced test set; it is wrapped to also record, at
rounds 10, 20, ..., 100 of stage 1, GM and many/med/few (`common.gm_row`) of the model it evaluated (FedAvg's), and
in stage 2 the test accuracy of every epoch's classifier. These stage-1 rows are what the table compares with ours
(ours evaluates FedAvg's model during training too; its stage 2 runs after the last round). Stage 2 is reported
beside: theirs at the cell's budget (E = 6, the best of 5 epochs on the test set) and at their default (E = 28:
`re_train_classifier` called again on the same stage-1 model, the noise draws continuing the global generator), ours
at the cell's budget (5 steps, chosen on the clients' validation data) and at 27 steps (the cell's `own_*`).

Their code reports no personalised accuracy, so PM is ours only.
"""
import argparse, copy, importlib.util, json, os, sys, tempfile, time, types
from pathlib import Path
import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import check_commit, with_changes, save_theirs, gm_row, write_table as common_table, TensorSet, EVAL_ROUNDS, adapter_cli
from fedloge_nb.federated import FedConfig, sample_clients
from fedloge_nb.data import make_fed_data, augment_batch
from fedloge_nb.models import make_backbone
from fedloge_nb.registry import get_method, matched_hp, load_methods


def stage2_epochs(cfg: FedConfig) -> int:
    "Ours' npc_epochs for the cell: its hp, else the `--post_epochs` budget, else the default 27."
    load_methods(); cls = get_method('fednpc')
    return int({**cls.defaults, **cfg.hp, **matched_hp(cls, cfg)}['npc_epochs'])


def load_theirs(folder: Path, cfg: FedConfig, fed, args, rec):
    "Their FedAvg-FedNPC.py as a module, with the data, model, sampling, arguments, optimiser momentum and device replaced in its namespace."
    sys.path.insert(0, str(folder))
    spec = importlib.util.spec_from_file_location('fedavg_fednpc', folder/'FedAvg-FedNPC.py')
    M = importlib.util.module_from_spec(spec); spec.loader.exec_module(M)

    pool, test = TensorSet(fed.x_train, fed.y_train), TensorSet(fed.x_test, fed.y_test)
    M.datasets = types.SimpleNamespace(CIFAR10=lambda root, train=True, **kw: pool if train else test,
                                       CIFAR100=lambda root, train=True, **kw: pool if train else test)
    used = torch.cat([torch.as_tensor(i) for i in fed.train_idx])
    M.train_long_tail = lambda l2i, num_classes, imb_factor, imb_type: (None, [used[fed.y_train[used] == c].tolist() for c in range(num_classes)])
    M.clients_indices = lambda l2i, num_classes, num_clients, alpha, seed: [fed.train_idx[k].tolist() for k in range(num_clients)]
    M.classify_label = lambda dataset, num_classes: [torch.nonzero(fed.y_train == c).flatten().tolist() for c in range(num_classes)]

    class FedLTCNN(nn.Module):
        "The package's CNN backbone under their ResNet_cifar's `classifier` (Linear with bias); forward returns (feature, logits) as theirs."
        def __init__(self, resnet_size=8, scaling=4, save_activations=False, group_norm_num_groups=None, freeze_bn=False, freeze_bn_affine=False, num_classes=10):
            super().__init__()
            self.num_classes = num_classes
            self.base = make_backbone(cfg.model, fed.in_channels, fed.img_size)
            self.classifier = nn.Linear(in_features=self.base.feature_dim, out_features=self.num_classes)
        def forward(self, x):
            feature = self.base(x)
            y = self.classifier(feature)
            return feature, y
    M.ResNet_cifar = FedLTCNN

    class _Augment:
        "Their `transforms` stub: Compose(...) is the package's augmentation of the dataset (`fed.augment`; None: the identity)."
        RandomCrop = RandomHorizontalFlip = ToTensor = Normalize = staticmethod(lambda *a, **k: None)   # their transform_all (CIFAR's) goes to the stubbed datasets only
        @staticmethod
        def Compose(_): return lambda x: augment_batch(x, fed.augment) if fed.augment else x
    M.transforms = _Augment

    calls = {'round': 0}
    class _Sampler:
        def __init__(self, seed): pass
        def choice(self, total_clients, n, replace=False):
            calls['round'] += 1                          # their loop draws once a round, from round 1
            s = np.array(sample_clients(cfg.clients, cfg.frac, cfg.seed, calls['round']))
            assert len(s) == n, (len(s), n)
            return s
    M.np = types.SimpleNamespace(**{k: getattr(np, k) for k in dir(np) if not k.startswith('__')})
    M.np.random = types.SimpleNamespace(**{k: getattr(np.random, k) for k in dir(np.random) if not k.startswith('__')})
    M.np.random.RandomState = _Sampler

    M.args_parser = lambda: args
    M.SGD = lambda params, lr: torch.optim.SGD(params, lr=lr, momentum=float(cfg.momentum), weight_decay=float(cfg.weight_decay))

    global_eval = M.Global.global_eval
    def recorded_eval(self, fedavg_params, data_test, batch_size_test):
        "Their global_eval, recorded: stage 1 (one call a round) GM rows at the evaluation rounds; stage 2 every epoch's accuracy."
        if fedavg_params is None: fedavg_params = rec['stage1_params']        # their stage 2 found no better epoch
        acc = global_eval(self, fedavg_params, data_test, batch_size_test)
        if rec['stage'] == 1:
            rec['calls'] += 1
            if rec['calls'] in rec['evals']:
                rec['rows'].append(gm_row(rec['calls'], _Callable(self.syn_model), fed, args.device))
                print(f"round {rec['calls']}: GM {rec['rows'][-1]['gm_acc']:.2f} (their accuracy {100 * acc:.2f}) ({time.time() - rec['t0']:.0f} s)", flush=True)
            if rec['calls'] == args.num_rounds: rec['stage'], rec['stage1_params'] = 2, copy.deepcopy(fedavg_params)
        else: rec['stage2'].append((copy.deepcopy(fedavg_params), acc))
        return acc
    M.Global.global_eval = recorded_eval
    return M


class _Callable(nn.Module):
    "A model's logits as a module (what `gm_row` evaluates)."
    def __init__(self, m): super().__init__(); self.m = m
    def forward(self, x): return self.m(x)[1]


def run_theirs(folder, commit, config, out, rounds=None, sets=()):
    head = check_commit(folder, commit); folder = Path(folder).resolve()
    cfg = with_changes(config, rounds, sets)
    if cfg.lr_decay != 1.0: sys.exit("their local lr is constant: the cell's lr_decay must be 1")
    fed = make_fed_data(**cfg.data_args())
    steps = stage2_epochs(cfg)
    args = argparse.Namespace(path_cifar10='unused', path_cifar100='unused', num_classes=int(fed.num_classes), num_clients=int(cfg.clients),
                              num_rounds=int(cfg.rounds), num_online_clients=max(1, int(cfg.frac * cfg.clients)),
                              num_epochs_local_training=int(cfg.local_epochs), batch_size_local_training=int(cfg.batch_size),
                              batch_size_test=500, lr_local_training=float(cfg.lr), device='cpu', non_iid_alpha=float(cfg.alpha),
                              seed=int(cfg.seed), imb_type='exp', imb_factor=1 / float(cfg.imb_factor),
                              baseline_name='FedAvg', lr=0.1, E=steps + 1, M=10000)
    rec = dict(stage=1, calls=0, evals=set(EVAL_ROUNDS(cfg.rounds)), rows=[], stage2=[], t0=time.time())
    torch.Tensor.cuda = lambda self, *a, **k: self
    nn.Module.cuda = lambda self, *a, **k: self
    M = load_theirs(folder, cfg, fed, args, rec)
    test = TensorSet(fed.x_test, fed.y_test)
    work = Path(tempfile.mkdtemp(prefix='fednpc_theirs_')); cwd = os.getcwd(); os.chdir(work)
    try:
        t0 = time.time(); M.FedNPC(); dt = time.time() - t0
        main = stage2_result(M, rec['stage2'], args.E, cfg, fed, args)
        # their default budget, E = 28, on the same stage-1 model: their stage-2 lines again (FedNPC(), after the checkpoint)
        rec['stage2'] = []; a28 = argparse.Namespace(**{**vars(args), 'E': 28})
        global_model = M.Global(num_classes=args.num_classes, device=args.device, args=a28)
        acc = global_model.global_eval(rec['stage1_params'], test, args.batch_size_test)
        re_global_model = copy.deepcopy(global_model.syn_model)
        copy_global_model = copy.deepcopy(global_model)
        re_best_pth = M.re_train_classifier(a28, acc, copy_global_model, re_global_model, test)
        global_model.global_eval(re_best_pth, test, args.batch_size_test)
        default = stage2_result(M, rec['stage2'], 28, cfg, fed, args)
    finally: os.chdir(cwd)
    print(f"stage 2, E = {args.E}: epoch {main['chosen_epoch']}, GM {main['chosen']['gm_acc']:.2f}; E = 28: epoch {default['chosen_epoch']}, GM {default['chosen']['gm_acc']:.2f}")
    save_theirs(out, repository='https://github.com/JintongGao/FedNPC', commit=head, cfg=cfg, rows=rec['rows'], wall_s=dt, arguments=vars(args), pm_definition=None,
                stage2=main, stage2_E28=default,
                stage2_definition="their stage 2 on the stage-1 model: E - 1 epochs, each on a fresh noise batch; kept: the first epoch with the best test accuracy above the stage-1 model's (0: the stage-1 model)")


def stage2_result(M, calls, E, cfg, fed, args) -> dict:
    "From their stage 2's global_eval calls (the stage-1 model, each epoch, the kept model): their choice, its GM row and the last epoch's."
    (_, acc0), epochs, (kept, _) = calls[0], calls[1:-1], calls[-1]
    assert len(epochs) == E - 1, (len(epochs), E)
    best_i, best = 0, acc0
    for i, (_, a) in enumerate(epochs, 1):
        if a > best: best_i, best = i, a                 # their `if acc > best_acc`
    m = M.ResNet_cifar(num_classes=args.num_classes)
    row = lambda p: (m.load_state_dict(p), gm_row(cfg.rounds, _Callable(m), fed, args.device))[1]
    pick = lambda r: {k: r[k] for k in ('gm_acc', 'gm_many', 'gm_med', 'gm_few')}
    return dict(E=E, epochs=E - 1, chosen_epoch=best_i, stage1_test_acc=100 * acc0, test_acc_per_epoch=[100 * a for _, a in epochs],
                chosen=pick(row(kept)), last_epoch=pick(row(epochs[-1][0])) if epochs else None)


def check(folder, commit, config, client=0, rounds=2, their_momentum=None):
    """Both codes from the same model on the same data. Stage 1: `rounds` local updates of one client, ours
    (`FedNPC.client_update`, FedAvg's) and theirs (`Local.local_train`, its loader handed our batches of the same
    seed; `their_momentum`, a negative control: their local SGD's momentum, e.g. their own 0). Stage 2: from the classifier that update left, their `re_train_classifier` (E = 6) and our `npc_candidates`
    (5 steps) on the same noise batches (theirs recorded, handed to ours): the classifier after every epoch. Prints the
    largest differences."""
    head = check_commit(folder, commit); folder = Path(folder).resolve()
    cfg = with_changes(config)
    fed = make_fed_data(**cfg.data_args())
    import fedloge_nb.fednpc as N
    from fedloge_nb.engine import start_run
    algo = N.FedNPC(**cfg.hp); cds, css, gs = start_run(algo, fed, cfg)
    args = argparse.Namespace(num_classes=int(fed.num_classes), num_epochs_local_training=int(cfg.local_epochs), batch_size_local_training=int(cfg.batch_size),
                              batch_size_test=500, lr_local_training=float(cfg.lr), device='cpu', seed=int(cfg.seed), lr=0.1, E=6, M=10000)
    rec = dict(stage=2, calls=0, evals=set(), rows=[], stage2=[], stage1_params=None)
    torch.Tensor.cuda = lambda self, *a, **k: self
    nn.Module.cuda = lambda self, *a, **k: self
    M = load_theirs(folder, cfg, fed, args, rec)
    if their_momentum is not None: M.SGD = lambda params, lr: torch.optim.SGD(params, lr=lr, momentum=their_momentum)
    to_theirs = lambda sd: {('base.' + k[9:] if k.startswith('backbone.') else 'classifier.' + k[5:]): v.clone() for k, v in sd.items()}
    to_ours = lambda sd: {('backbone.' + k[5:] if k.startswith('base.') else 'head.' + k[11:]): v for k, v in sd.items()}
    d = cds[client]; out = []; g = {k: v.clone() for k, v in gs.items()}
    for r in range(1, rounds + 1):
        seed = 1000 + r
        ours = {k: v.detach().clone() for k, v in algo.client_update(g, css[client], d, cfg, seed).state.items()}
        batches = [(xb.clone(), yb.clone()) for xb, yb in d.batches(cfg.batch_size, seed, cfg.local_epochs)]
        M.DataLoader = lambda dataset=None, batch_size=None, shuffle=None, **kw: batches
        local = M.Local(data_client=None, class_list=None)
        theirs = to_ours(local.local_train(args, to_theirs(g))[0])
        dp = max((ours[k] - theirs[k]).abs().max().item() for k in theirs); moved = max((ours[k] - g[k]).abs().max().item() for k in theirs)
        line = f"stage 1, client {client}, update {r} ({len(d)} samples, {len(batches)} steps): parameters max |ours - theirs| {dp:.2e} (largest change in the update {moved:.2e})"
        print(line, flush=True); out.append(line)
        g = ours                                         # the next update starts from this one's model
    noise = []
    gen = M.generate_noisy_batch
    def recorded(a, n_classes, dim):
        f, y = gen(a, n_classes, dim); noise.append((f.clone(), y.clone())); return f, y
    M.generate_noisy_batch = recorded
    glob = M.Global(num_classes=args.num_classes, device='cpu', args=args)
    test = TensorSet(fed.x_test, fed.y_test)
    rec['stage1_params'] = to_theirs(g)
    acc = glob.global_eval(to_theirs(g), test, args.batch_size_test)
    M.re_train_classifier(args, acc, copy.deepcopy(glob), copy.deepcopy(glob.syn_model), test)
    epochs = rec['stage2'][1:]
    batches = iter(noise)
    orig = N.noise_batch; N.noise_batch = lambda *a, **k: next(batches)
    Ws, bs = N.npc_candidates(g['head.weight'], g['head.bias'], args.E - 1, args.M, 0.1, 0.9)
    N.noise_batch = orig
    for i, (p, _) in enumerate(epochs, 1):
        dw = (Ws[i] - p['classifier.weight']).abs().max().item(); db = (bs[i] - p['classifier.bias']).abs().max().item()
        mv = (Ws[i] - Ws[0]).abs().max().item()
        line = f"stage 2, epoch {i}: classifier weight max |ours - theirs| {dw:.2e}, bias {db:.2e} (largest change of the weight since epoch 0 {mv:.2e})"
        print(line, flush=True); out.append(line)
    return out


def write_table(folder, out, cell_dir=None):
    "The comparison as markdown (`common.write_table`) with FedNPC's setting, and stage 2 beside it."
    runs = {}
    for p in sorted(Path(folder).glob('*.json')):
        r = json.loads(p.read_text()); runs.setdefault(r['config']['seed'], {})[r['side']] = r
    seeds = sorted(k for k, v in runs.items() if {'ours', 'theirs'} <= set(v))
    c = runs[seeds[0]]['ours']['config']
    f = lambda x: '-' if x is None else f'{x:.2f}'
    mean = lambda xs: None if any(x is None for x in xs) else float(np.mean(xs))
    cells = [json.loads((Path(str(cell_dir).replace('_s0', f'_s{s}'))/'summary.json').read_text()) for s in seeds] if cell_dir else None
    t = [runs[s]['theirs'] for s in seeds]; o = [runs[s]['ours'] for s in seeds]
    E = t[0]['stage2']['E']
    lines = ['', f"**Stage 2 (the classifier re-trained on noise after round {c['rounds']}).** The rows above are stage 1 (FedAvg's model during "
             "training, as both codes evaluate it). After the last round, GM of the re-trained classifier, mean over the seeds "
             f"({', '.join(map(str, seeds))}); per seed in brackets:", '',
             '| | epochs | which epoch is kept | GM | few | per seed (GM) |', '|---|---|---|---|---|---|']
    def line(name, ep, how, gms, fews):
        lines.append(f"| {name} | {ep} | {how} | {f(mean(gms))} | {f(mean(fews))} | {', '.join(f(x) for x in gms)} |")
    line('ours, stage 1 only (FedAvg head, after round %d)' % c['rounds'], 0, '-', [r['rows'][-1]['gm_acc'] for r in o],
         [r['rows'][-1]['gm_few'] for r in o])
    line('theirs, stage 1 only', 0, '-', [r['rows'][-1]['gm_acc'] for r in t], [r['rows'][-1]['gm_few'] for r in t])
    line("ours, the cell's budget", E - 1, "best balanced accuracy on the clients' validation data", [r['final_summary']['gm_acc'] for r in o], [r['final_summary']['gm_few'] for r in o])
    line("theirs, the cell's budget", E - 1, 'best accuracy on the test set (their code); ' + ', '.join(str(r['stage2']['chosen_epoch']) for r in t),
         [r['stage2']['chosen']['gm_acc'] for r in t], [r['stage2']['chosen']['gm_few'] for r in t])
    line("theirs, the cell's budget, last epoch", E - 1, 'the last', [r['stage2']['last_epoch']['gm_acc'] for r in t], [r['stage2']['last_epoch']['gm_few'] for r in t])
    if cells:
        line("ours, their default budget (the cell's `own_*`)", cells[0]['own_hp']['npc_epochs'], "best balanced accuracy on validation; " + ', '.join(str(x['own_npc_step']) for x in cells),
             [x['own_gm_acc'] for x in cells], [x['own_gm_few'] for x in cells])
    line('theirs, their default budget (E = 28)', t[0]['stage2_E28']['epochs'], 'best accuracy on the test set (their code); ' + ', '.join(str(r['stage2_E28']['chosen_epoch']) for r in t),
         [r['stage2_E28']['chosen']['gm_acc'] for r in t], [r['stage2_E28']['chosen']['gm_few'] for r in t])
    line('theirs, their default budget, last epoch', t[0]['stage2_E28']['epochs'], 'the last', [r['stage2_E28']['last_epoch']['gm_acc'] for r in t], [r['stage2_E28']['last_epoch']['gm_few'] for r in t])
    lines += ['', "Their stage 2 keeps the epoch with the best accuracy on the test set it reports (selection on the test set); ours keeps the one "
              "with the best balanced accuracy on the clients' validation splits, so their kept number is an upper bound of what its rule "
              "can give on unseen data. The noise batches differ between the two codes (their global generator, our seeded one)."]
    setting = (f"Setting: the leaderboard's stage 2 at {c['dataset']} IF {c['imb_factor']}, Dirichlet alpha {c['alpha']} (FedNPC at its defaults, "
               f"--post_epochs {c.get('post_epochs')}: {E - 1} stage-2 epochs): {c['clients']} clients, frac {c['frac']}, {c['rounds']} rounds x {c['local_epochs']} local epoch, "
               f"batch {c['batch_size']}, lr {c['lr']}, momentum {c['momentum']}, weight decay {c['weight_decay']}, val_frac {c.get('val_frac', 0)}. "
               "GM, many/med/few below: stage 1 (FedAvg), the model both codes train; stage 2 after the table.")
    if cells:                                            # common's cell line reads gm_acc_lastk, which a cell whose stage 2 changed GM has not: the stage-1 one instead
        lines += ['', f"The leaderboard's own cells of these seeds (`{cell_dir}` and its seeds; made on {', '.join(sorted({x['environment']['cpu'] for x in cells}))}, "
                  f"torch {', '.join(sorted({x['environment']['torch'] for x in cells}))}; ours here ran on {', '.join(sorted({r['environment']['cpu'] for r in o}))}): "
                  f"stage 1 GM last 3 (`gm_acc_global_lastk`) {', '.join(f(x['gm_acc_global_lastk']) for x in cells)}, GM after stage 2 {', '.join(f(x['gm_acc']) for x in cells)} "
                  f"(steps {', '.join(str(x['npc_step']) for x in cells)}), against ours here {', '.join(f(r['summary']['gm_acc_last3']) for r in o)} and "
                  f"{', '.join(f(r['final_summary']['gm_acc']) for r in o)}."]
    return common_table(folder, out, method='FedNPC', script='scripts/peers/fednpc.py', setting=setting, cell_dir=None, extra_lines=lines)


if __name__ == '__main__':
    p, sub, t = adapter_cli(__doc__)
    c = sub.add_parser('check', help="both codes from the same model on the same data (see `check`)")
    c.add_argument('folder'); c.add_argument('commit'); c.add_argument('config'); c.add_argument('--client', type=int, default=0); c.add_argument('--rounds', type=int, default=2)
    c.add_argument('--their_momentum', type=float, default=None, help='a negative control: their local momentum (their code: 0)')
    a = p.parse_args()
    if a.side == 'theirs': run_theirs(a.folder, a.commit, a.config, a.out, a.rounds, a.set)
    elif a.side == 'check': check(a.folder, a.commit, a.config, a.client, a.rounds, a.their_momentum)
    else: write_table(a.folder, a.out, a.cell)
