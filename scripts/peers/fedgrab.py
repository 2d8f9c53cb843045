"""Fed-GraB by its authors' code (ZackZikaiXiao/FedGraB) beside ours, on the same data, model, client sampling and optimiser.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/peers/fedgrab.py theirs FOLDER COMMIT CONFIG.json OUT.json [--rounds N] [--set k=v ...]
    OMP_NUM_THREADS=1 .venv/bin/python scripts/peers/common.py ours CONFIG.json OUT.json [--rounds N] [--set k=v ...]
    .venv/bin/python scripts/peers/fedgrab.py table FOLDER OUT.md [--cell CELL_DIR_OF_SEED_0]

FOLDER is a checkout of https://github.com/ZackZikaiXiao/FedGraB at COMMIT (checked with git; its code is run from
there, never copied into this repository). CONFIG.json is a leaderboard cell's `config.json` (e.g.
`results/sweeps/leaderboard_if100/fmnist_if100_a0.5_fedgrab_kp1_s0/config.json`): its data arguments, seed, rounds,
clients, frac, batch size, lr, momentum and Fed-GraB's K_p are used by both sides (`--set` changes both alike).

What of theirs runs unmodified: `util.losses.PIDLOSS` and `PID` (the per-class PID controllers in their incremental
"PID_DELTA" form, the map 10/9 / (1/9 + exp(-x/2)), the BCE summed over classes / batch, the backward hook that
re-weights the logit gradients, releases tail classes at random and accumulates the positive and negative gradient
magnitudes), one `PIDLOSS` per client built as their `fed_grab.py` builds it (`pidmask=["head", "middle"]`,
`get_3shotclass(tail_class=every class)`, `apply_3shot_mask`, `apply_class_activation`: every controller open, kept
across rounds), `util.update_baseline.LocalUpdate.update_weights_pid` (their local training: SGD over the backbone's
parameters only, momentum, the loss on `GBA_Layer(net(images))`; so their classifier never trains, as in their code),
and `util.fedavg.FedAvg_Rod` (sample-weighted averaging of backbone and classifier). Their round loop is in
`fed_grab.py`'s `__main__` block, which cannot be imported; `run_theirs` below is that block statement for statement
(the per-client classifiers `g_linears`, `update_weights_pid` on a deep copy of the global backbone, `FedAvg_Rod`,
every client's classifier reset to the averaged one after the round), with these replaced:

- data: their `myDataset` downloads CIFAR-10 and partitions it itself; here `dataset_train` is the package's
  long-tailed training pool (`fedloge_nb.data.make_fed_data` for the cell's data arguments, so the same seed gives
  the same split, as a `TensorSet`) and `dict_users[k]` the package's client training indices. Their `LocalUpdate`
  builds its loader over it (batch `local_bs` = the cell's batch size, shuffled).
- model: their `build_model(args)` gives a ResNet backbone with 512-d features and the classifier is
  `nn.Linear(512 * block_expansion, num_classes)`; here the backbone is the package's CNN (`make_backbone`, the cell's
  `cnn`) and the classifier `nn.Linear(backbone.feature_dim, num_classes)`, written as theirs (with a bias, their
  default init). Built in their order: backbone, global classifier, then one classifier per client.
- client sampling: their `fed_grab.py` sets `args.frac = 1` and trains every client every round (the
  `np.random.choice` draw is not used by the loop); here the round's clients are the package's
  `sample_clients(clients, frac, seed, round)` (rounds from 1), so both sides train the same clients; those clients
  only are trained and averaged (their `dict_len` over `idxs_users`), the others' controllers wait.
- hyperparameters: `PID.Kp` is a constant 10 in their class; ours exposes it (`kp`) and the cell's value (1.0) is set
  on every controller after construction. K_i 0.01 and K_d 0.1 are theirs and ours alike. lr, momentum, local
  epochs, batch size from the cell (their optimiser has no weight decay, the cell's is 0; their lr is constant, the
  cell's lr decay is 1). Their code has no DPA (every class is a tail class, every controller open); ours runs
  its DPA after round `dpa_round` (5 in the cell); theirs is left without it: a difference of the methods as written.
- seeds and device: their script seeds nothing (the seed lines of their `main.py` are commented out); `torch`,
  `numpy` and `random` are seeded with the cell's seed before the model is built, so a run is repeatable. Device
  `cpu` through their `args.device`. Their per-round `globaltest` (hard-coded CIFAR-10 shot groups) is replaced by
  `common.gm_row` on the balanced test set at rounds 10, 20, ..., 100 (GM and the package's many/med/few).

`--variant train_head` (a diagnostic, not their code; its JSONs are kept apart from the table's) hands their
`update_weights_pid` the backbone and the client's classifier as one `net` (and an identity `GBA_Layer`), so that their
optimiser steps the classifier too, as ours and FedLTLib's port (gzhu-hcai/LongTailLib, `clientgrab.py`) do.

Their code reports no personalised accuracy (their `localtest` is not called by `fed_grab.py`), so PM is ours only.
"""
import argparse, copy, json, random, sys, time
from pathlib import Path
import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import check_commit, with_changes, save_theirs, gm_row, write_table as common_table, TensorSet, EVAL_ROUNDS, adapter_cli
from fedloge_nb.federated import FedConfig, sample_clients
from fedloge_nb.data import make_fed_data
from fedloge_nb.models import make_backbone


def import_theirs(folder):
    "Their modules (local update, loss, averaging) from the checkout."
    sys.path.insert(0, str(folder))
    from util.update_baseline import LocalUpdate
    from util.losses import PIDLOSS
    from util.fedavg import FedAvg_Rod
    return LocalUpdate, PIDLOSS, FedAvg_Rod


class _Both(nn.Module):
    "Diagnostic `--variant train_head`: backbone and the client's classifier as one `net`, so that their optimiser (over `net.parameters()`) steps both."
    def __init__(self, b, h): super().__init__(); self.b, self.h = b, h
    def forward(self, x): return self.h(self.b(x))


def run_theirs(folder, commit, config, out, rounds=None, sets=(), variant='none'):
    head = check_commit(folder, commit); folder = Path(folder).resolve()
    cfg = with_changes(config, rounds, sets)
    if cfg.lr_decay != 1.0 or cfg.weight_decay != 0.0:
        sys.exit("their optimiser has a constant lr and no weight decay: the cell's lr_decay must be 1 and weight_decay 0")
    fed = make_fed_data(**cfg.data_args())
    LocalUpdate, PIDLOSS, FedAvg_Rod = import_theirs(folder)
    kp = float(cfg.hp.get('kp', 10.0)); ki = float(cfg.hp.get('ki', 0.01)); kd = float(cfg.hp.get('kd', 0.1))
    args = argparse.Namespace(lr=float(cfg.lr), momentum=float(cfg.momentum), local_bs=int(cfg.batch_size), local_ep=int(cfg.local_epochs),
                              num_users=int(cfg.clients), rounds=int(cfg.rounds), seed=int(cfg.seed), beta=0, loss_type='CE',
                              num_classes=int(fed.num_classes), device='cpu')
    torch.manual_seed(cfg.seed); np.random.seed(cfg.seed); random.seed(cfg.seed)
    dataset_train = TensorSet(fed.x_train, fed.y_train)
    dict_users = {k: fed.train_idx[k].tolist() for k in range(args.num_users)}
    num_classes = fed.num_classes

    # --- their fed_grab.py __main__, the data, model and sampling replaced (see the docstring)
    g_backbone = make_backbone(cfg.model, fed.in_channels, fed.img_size).to(args.device)
    d = g_backbone.feature_dim
    g_classifier = nn.Linear(d, num_classes).to(args.device)
    g_linears = [nn.Linear(d, num_classes) for i in range(args.num_users)]
    for i in range(args.num_users):
        g_linears[i] = g_linears[i].to(args.device)
    g_pid_losses = [PIDLOSS(device=args.device, pidmask=["head", "middle"], class_activation=False, num_classes=num_classes) for i in range(args.num_users)]
    for idx in range(args.num_users):
        g_pid_losses[idx].get_3shotclass(head_class=[], middle_class=[], tail_class=[])
    for idx in range(args.num_users):
        g_pid_losses[idx].get_3shotclass(head_class=[], middle_class=[], tail_class=list(range(num_classes)))
        g_pid_losses[idx].apply_3shot_mask()
        g_pid_losses[idx].apply_class_activation()
        for c in g_pid_losses[idx].controllers: c.Kp, c.Ki, c.Kd = kp, ki, kd      # the cell's K_p (theirs: a constant 10)

    rows, evals = [], set(EVAL_ROUNDS(cfg.rounds))
    t0 = time.time()
    for rnd in range(args.rounds):
        backbone_w_locals, linear_w_locals, loss_locals = [], [], []
        idxs_users = [int(k) for k in sample_clients(cfg.clients, cfg.frac, cfg.seed, rnd + 1)]
        for idx in idxs_users:
            local = LocalUpdate(args=args, dataset=dataset_train, idxs=dict_users[idx])
            if variant == 'train_head':                  # diagnostic only: the classifier trains with the backbone
                both, loss_local = local.update_weights_pid(net=_Both(copy.deepcopy(g_backbone), g_linears[idx]), seed=args.seed, epoch=args.local_ep,
                                                            GBA_Loss=g_pid_losses[idx], GBA_Layer=nn.Identity())[::2]
                backbone_w_local = {k[2:]: v for k, v in both.items() if k.startswith('b.')}
                linear_w_local = {k[2:]: v for k, v in both.items() if k.startswith('h.')}
            else:
                backbone_w_local, linear_w_local, loss_local = local.update_weights_pid(net=copy.deepcopy(g_backbone).to(args.device), seed=args.seed, epoch=args.local_ep,
                                                                                        GBA_Loss=g_pid_losses[idx], GBA_Layer=g_linears[idx])
            backbone_w_locals.append(copy.deepcopy(backbone_w_local))
            linear_w_locals.append(copy.deepcopy(linear_w_local))
            loss_locals.append(copy.deepcopy(loss_local))
        dict_len = [len(dict_users[idx]) for idx in idxs_users]
        backbone_w_avg, linear_w_avg = FedAvg_Rod(backbone_w_locals, linear_w_locals, dict_len)
        g_backbone.load_state_dict(copy.deepcopy(backbone_w_avg))
        g_classifier.load_state_dict(copy.deepcopy(linear_w_avg))
        g_linears = [copy.deepcopy(g_classifier) for i in range(args.num_users)]
        if rnd + 1 in evals:
            rows.append(gm_row(rnd + 1, nn.Sequential(copy.deepcopy(g_backbone), copy.deepcopy(g_classifier)), fed, args.device))
            print(f"round {rnd + 1}: GM {rows[-1]['gm_acc']:.2f} few {rows[-1]['gm_few']:.2f} loss {np.mean(loss_locals):.4f} ({time.time() - t0:.0f} s)", flush=True)
    dt = time.time() - t0
    save_theirs(out, repository='https://github.com/ZackZikaiXiao/FedGraB', commit=head, cfg=cfg, rows=rows, wall_s=dt,
                arguments=dict(vars(args), Kp=kp, Ki=ki, Kd=kd, pidmask=["head", "middle"], tail_class=list(range(num_classes))), pm_definition=None,
                variant=variant)


def check(folder, commit, config, client=0, rounds=3, sets=(), their_kp=None):
    """One client's local updates by both codes from the same model on the same batches: ours (`FedGraB.client_update`)
    and theirs (`update_weights_pid` with `PIDLOSS`, their classifier handed to their optimiser as in `--variant
    train_head`, since ours trains it), the random releases of tail classes drawn from one seeded stream on each side.
    `rounds` successive updates of the same client (its controllers carried on, the model reset to the same start each
    time); prints the largest differences of the parameters and of the controllers' states. `their_kp` (a negative
    control): their K_p set to another value than ours."""
    head = check_commit(folder, commit); folder = Path(folder).resolve()
    cfg = with_changes(config, None, sets)
    fed = make_fed_data(**cfg.data_args())
    LocalUpdate, PIDLOSS, FedAvg_Rod = import_theirs(folder)
    import util.losses as L
    import fedloge_nb.fedgrab as G
    from fedloge_nb.engine import start_run
    algo = G.FedGraB(**cfg.hp); cds, css, gs = start_run(algo, fed, cfg)
    gs = {k: v.clone() for k, v in gs.items()}
    gT, gO = torch.Generator().manual_seed(123), torch.Generator().manual_seed(123)
    L.random_unit = lambda p: torch.rand(1, generator=gT).item() < p           # theirs: one draw per tail class, as ours
    orig = G.release_mask; G.release_mask = lambda tail, generator=None: orig(tail, gO)
    h = algo.hp; C = fed.num_classes
    loss = PIDLOSS(device='cpu', pidmask=["head", "middle"], class_activation=False, num_classes=C)
    loss.get_3shotclass(head_class=[], middle_class=[], tail_class=list(range(C))); loss.apply_3shot_mask(); loss.apply_class_activation()
    for c in loss.controllers: c.Kp, c.Ki, c.Kd = (h['kp'] if their_kp is None else their_kp), h['ki'], h['kd']
    args = argparse.Namespace(lr=float(cfg.lr), momentum=float(cfg.momentum), local_bs=int(cfg.batch_size), local_ep=int(cfg.local_epochs), device='cpu')
    cs = css[client]; d = cds[client]; out = []
    for r in range(1, rounds + 1):
        seed = 1000 + r
        res = algo.client_update(gs, cs, d, cfg, seed); cs = res.client_state
        ours = {k: v.detach().clone() for k, v in algo.local.state_dict().items()}
        net = _Both(copy.deepcopy(algo.net.backbone), copy.deepcopy(algo.net.head)); net.load_state_dict({('b.' + k[9:] if k.startswith('backbone.') else 'h.' + k[5:]): v for k, v in gs.items()})
        local = LocalUpdate(args=args, dataset=TensorSet(fed.x_train, fed.y_train), idxs=fed.train_idx[client].tolist())
        local.ldr_train = [(xb.clone(), yb.clone()) for xb, yb in d.batches(cfg.batch_size, seed, cfg.local_epochs)]
        sd = local.update_weights_pid(net=net, seed=0, epoch=args.local_ep, GBA_Loss=loss, GBA_Layer=nn.Identity())[0]
        theirs = {('backbone.' + k[2:] if k.startswith('b.') else 'head.' + k[2:]): v for k, v in sd.items()}
        dp = max((ours[k].float() - theirs[k].float()).abs().max().item() for k in theirs)
        scale = max(ours[k].float().abs().max().item() for k in theirs)
        dout = (cs['grab.out'] - torch.tensor([float(c.out) for c in loss.controllers])).abs().max().item()
        dpos = (cs['grab.pos'] - loss.pos_grad).abs().max().item(); dneg = (cs['grab.neg'] - loss.neg_grad).abs().max().item()
        moved = max((ours[k].float() - gs[k].float()).abs().max().item() for k in theirs)
        line = (f"client {client}, update {r} ({len(d)} samples, {len(local.ldr_train)} steps): parameters max |ours - theirs| {dp:.2e} (largest parameter {scale:.2f}, "
                f"largest change in the update {moved:.2e}); controller outputs {dout:.2e} (largest {cs['grab.out'].abs().max().item():.2f}); "
                f"positive sums {dpos:.2e}, negative sums {dneg:.2e} (largest {max(cs['grab.pos'].max().item(), cs['grab.neg'].max().item()):.2f})")
        print(line, flush=True); out.append(line)
    return out


def write_table(folder, out, cell_dir=None):
    "The comparison as markdown (`common.write_table`) with Fed-GraB's setting."
    c = json.loads(next(Path(folder).glob('ours_*.json')).read_text())['config']
    setting = (f"Setting: the leaderboard's stage 2 at {c['dataset']} IF {c['imb_factor']}, Dirichlet alpha {c['alpha']} (Fed-GraB at the variant stage 1 chose, "
               f"hp {c['hp']}): {c['clients']} clients, frac {c['frac']}, {c['rounds']} rounds x {c['local_epochs']} local epoch, "
               f"batch {c['batch_size']}, lr {c['lr']}, momentum {c['momentum']}, weight decay {c['weight_decay']}, val_frac {c.get('val_frac', 0)}.")
    return common_table(folder, out, method='Fed-GraB', script='scripts/peers/fedgrab.py', setting=setting, cell_dir=cell_dir, extra_lines=diagnostics(folder))


def diagnostics(folder) -> list:
    "Markdown lines on the runs in `folder/diagnostics` (one component swapped on each side), beside the table's runs, when there are any."
    from fedloge_nb.aggregate import t_halfwidth
    d = Path(folder)/'diagnostics'
    load = lambda pat: {json.loads(p.read_text())['config']['seed']: json.loads(p.read_text()) for p in sorted(d.glob(pat))}
    sides = [('ours (the cell: classifier trained, DPA after round 5)', load('../ours_if100_s*.json')),
             ('ours, DPA off (`--set hp.dpa_round=0`: every controller open, as their code)', load('ours_dpa0_if100_s*.json')),
             ('theirs (their classifier frozen, no DPA)', load('../theirs_if100_s*.json')),
             ('theirs, classifier trained (`--variant train_head`)', load('theirs_trainhead_if100_s*.json'))]
    if not (sides[1][1] or sides[3][1]): return []
    sides = [x for x in sides if x[1]]                  # the swaps that have run
    seeds = sorted(set.intersection(*[set(r) for _, r in sides]))
    if not seeds: return []
    f = lambda x: f'{x:.2f}'
    g = lambda r, k='gm_acc_last3': np.array([r[s]['summary'][k] for s in seeds], float)
    lines = ['', f"**One component at a time** (`{d}`; GM and few, means of the last 3 evaluations, over seeds {', '.join(map(str, seeds))}):", '',
             '| run | GM (last 3) | few (last 3) | GM per seed |', '|---|---|---|---|']
    for name, r in sides: lines.append(f"| {name} | {f(g(r).mean())} | {f(g(r, 'gm_few_last3').mean())} | {', '.join(f(x) for x in g(r))} |")
    lines += ['', '| difference (paired by seed) | GM (last 3) [95% CI] | few (last 3) |', '|---|---|---|']
    named = {name.split(' (')[0]: (name, r) for name, r in sides}
    pairs = [(named[a], named[b]) for a, b in (('theirs, classifier trained', 'ours, DPA off'), ('theirs, classifier trained', 'ours'), ('theirs', 'theirs, classifier trained'),
                                               ('ours', 'ours, DPA off'), ('theirs', 'ours')) if a in named and b in named]
    for (a, ra), (b, rb) in pairs:
        dd = g(ra) - g(rb); h = float(t_halfwidth(dd.std(ddof=1), len(dd))) if len(dd) > 1 else float('nan')
        lines.append(f"| {a.split(' (')[0]} minus {b.split(' (')[0]} | {dd.mean():+.2f} [{dd.mean() - h:+.2f}, {dd.mean() + h:+.2f}] | {(g(ra, 'gm_few_last3') - g(rb, 'gm_few_last3')).mean():+.2f} |")
    cmds = [r[s]['command'] for name, r in sides if ',' in name.split(' (')[0] for s in seeds]
    lines += ['', 'Their commands:', ''] + [f'- `{c}`' for c in cmds]
    lines += ['', f"One client's updates of both codes from the same model on the same batches: `{d}/check.md`."] if (d/'check.md').exists() else []
    return lines


if __name__ == '__main__':
    p, sub, t = adapter_cli(__doc__)
    t.add_argument('--variant', default='none', choices=('none', 'train_head'), help="diagnostic: 'train_head' lets their optimiser step the classifier too (not their code)")
    c = sub.add_parser('check', help="one client's updates by both codes from the same model and batches (see `check`)")
    c.add_argument('folder'); c.add_argument('commit'); c.add_argument('config'); c.add_argument('--client', type=int, default=0)
    c.add_argument('--rounds', type=int, default=3); c.add_argument('--set', action='append', default=[])
    c.add_argument('--their_kp', type=float, default=None, help="a negative control: their K_p (ours keeps the config's)")
    a = p.parse_args()
    if a.side == 'theirs': run_theirs(a.folder, a.commit, a.config, a.out, a.rounds, a.set, a.variant)
    elif a.side == 'check': check(a.folder, a.commit, a.config, a.client, a.rounds, a.set, a.their_kp)
    else: write_table(a.folder, a.out, a.cell)
