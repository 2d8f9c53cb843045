"""FedIC by its authors' code (shangxinyi/FEDIC) beside ours, on the same data, model, client sampling and optimiser.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/peers/fedic.py theirs FOLDER COMMIT CONFIG.json OUT.json [--rounds N] [--set k=v ...]
    OMP_NUM_THREADS=1 .venv/bin/python scripts/peers/fedic.py ours CONFIG.json OUT.json [--rounds N] [--set k=v ...]
    .venv/bin/python scripts/peers/fedic.py table FOLDER OUT.md [--cell CELL_DIR_OF_SEED_0]
    .venv/bin/python scripts/peers/fedic.py divergence FOLDER OUT.md

FOLDER is a checkout of https://github.com/shangxinyi/FEDIC at COMMIT (checked with git; its code is run, never copied
into this repository). CONFIG.json is a leaderboard cell's `config.json` (e.g.
`results/sweeps/leaderboard_if100/fmnist_if100_a0.5_fedic_s0/config.json`, lr 0.01, lambda 0.5, a server set of 100
images per class); `--set lr=0.05` (any FedConfig field, or hp.NAME) changes it on both sides alike.

`theirs` imports their `main.py` and runs the body of their `disalign()` round loop as written (their `Local` client:
SGD on cross-entropy over their DataLoader; their `Global.update_distillation_highway_feature`: the FedAvg average by
sample counts, 100 Adam steps fine-tuning a copy of it on the labelled server set, 100 Adam steps training their
`Ensemble_highway` teacher (sigmoid client weights normalised by their sum, per-class calibration, the gate), 100 Adam
steps distilling it into the average, the three Adam optimisers kept across rounds, lr 0.001, weight decay 0.0002,
batches of 20 labelled and 128 unlabelled images, T = 2, their `eval` on the test set every round), with only these
replaced at import time or in the arguments:

- data: their CIFAR-10 download, `partition_train_teach` (100 held-out images per class for the server),
  `train_long_tail` and `clients_indices` are replaced by the package's split for the cell's data arguments
  (`fedloge_nb.data.make_fed_data`; the same seed gives the same split): the clients' data are `fed.train_idx[k]` of
  `fed.x_train` (wrapped in their `Indices2Dataset`), the server's labelled balanced set (`dataset_global_teaching`)
  is the package's server set `fed.x_server` (the cell's `server_per_class` = 100 images per class, held out of the
  training images before the long tail, as their `partition_train_teach` does; our chapter reads the same set), and
  `data_global_test` is the balanced test set. Their unlabelled distillation set (CIFAR-100's 50,000 training images)
  has no counterpart in the package: the server set's images, without their labels, take its place (ours uses the same
  images for both terms of Eq. 4). Their server batches are augmented (random crop and flip of CIFAR images); the
  package's images are used as they are, on both sides.
- model: `ResNet_cifar_feature` (their ResNet-8 for 3x32x32 images, returning `(feature, logits)`) is replaced by the
  package's CNN backbone (`make_backbone`, the leaderboard's `cnn`) under a linear classifier with a bias (ours' head),
  returning `(feature, logits)` as theirs does. Their `Ensemble_highway` hard-codes the gate `classifier2 =
  Linear(256, 1)` for their ResNet's 256-d feature: it is built with the CNN's feature size (84) instead; nothing else
  of it changes (its 10 classes are Fashion-MNIST's 10; its feature average with weights 1/8 over the first 8 clients,
  written for their 8 clients a round, is kept, though the cell has 10 a round).
- client sampling: their `random_state.choice(total_clients, num_online_clients)` is replaced by the package's
  `sample_clients(clients, frac, seed, round)` (rounds from 1), so both sides train the same clients every round.
- the optimiser of the clients: their `Local` uses `SGD(params, lr)`; `main.SGD` is given the cell's momentum (0.5)
  and weight decay (0) so that both sides take the same client steps (their default is lr 0.1, no momentum, 10 local
  epochs of batch 128; the cell's lr, batch 64 and 1 epoch go in through their arguments).
- seeds and settings: their `__main__` seeds torch / numpy / random with 7 and their argument `seed` (7) seeds the
  server's batch draws; both are the cell's seed here. Their arguments are `options.args_parser()`'s defaults with
  num_clients, num_online_clients (clients x frac), num_rounds, num_epochs_local_training, batch_size_local_training,
  lr_local_training, seed and device 'cpu' from the cell; ld, temperature, lr_global_teaching and mini_batch_size from
  the cell's hp (ld, temperature, server_lr, server_batch) where given.
- logging: `tqdm` is a pass-through (their progress bars only).

Divergence is recorded, not raised: a wrapper around their `CrossEntropyLoss` and forward hooks on their teacher and
global model note the first non-finite loss or output and where (a client's training, the fine-tuning, the teacher's
training, the distillation); after each round the clients' uploaded weights, the global model, the fine-tuned copy and
the teacher's parameters are checked. The run stops after the first round with a non-finite value and its JSON says
`diverged: {round, what}`, with the evaluations before. Every round also records a trace (their test accuracy, the
clients' mean and largest loss, the distilled model's cross-entropy and largest |logit| on the server set, the
teacher's largest calibration scale, weight norms), the columns of `scripts/fedic_trace.py` for ours. Nothing of the
computation changes: the wrappers read values only.

`ours` runs the package's engine on the same config (as `scripts/peers/common.py ours`) with the same per-round trace
and divergence record (the engine's `DivergenceError` is caught, the evaluations before it are kept).

GM final, the mean of the last 3 evaluations (rounds 80, 90, 100) and many/med/few come from the global model on the
balanced test set (`common.gm_row`, ours' measurement). FedIC has no personalised model in their code; ours' PM (each
client's personalised model after `post_epochs`) has no counterpart there.
"""
import argparse, copy, dataclasses, functools, json, math, random, sys, tempfile, time
from pathlib import Path
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (check_commit, with_changes, gm_row, summarise, save_theirs, write_table as common_table, TensorSet, adapter_cli,
                    EVAL_ROUNDS, COMMAND, ENV)
from fedloge_nb.federated import FedConfig, sample_clients
from fedloge_nb.data import make_fed_data
from fedloge_nb.models import make_backbone
from fedloge_nb.datasets import atomic_write
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fedic_trace import _norms                                   # the trace's columns: scripts/fedic_trace.py

REPO = 'https://github.com/shangxinyi/FEDIC'
STAGES = ('fine-tune', 'teacher', 'distillation')      # the three server stages of their update, 100 steps each


def _finite(t) -> bool: return bool(torch.isfinite(t).all())


def _bad_keys(state: dict) -> list:
    "The names of the floating tensors of `state` holding a non-finite value."
    return [k for k, v in state.items() if torch.is_tensor(v) and v.is_floating_point() and not _finite(v)]


class Watch:
    "Where the first non-finite value of a round appeared, and the round's losses (read only; nothing changes)."
    def __init__(self): self.stage, self.server_calls, self.events, self.losses = None, 0, [], {}
    def new_round(self): self.server_calls, self.events, self.losses = 0, [], {}
    def note(self, what):
        if what not in self.events and len(self.events) < 20: self.events.append(what)   # each distinct event once, in order
    def loss(self, value, server):
        stage = STAGES[min(self.server_calls // 100, 2)] if server else self.stage
        if server: self.server_calls += 1
        v = float(value.detach())
        self.losses.setdefault(stage, []).append(v)
        if not math.isfinite(v): self.note(f'{stage}: loss {v}')


W = Watch()


# ---------------------------------------------------------------- theirs
def patch_theirs(folder: str, cfg: FedConfig, fed, variant=None):
    "Import their main.py from `folder` and replace the model, the clients' optimiser settings, tqdm; add the read-only watches."
    sys.path.insert(0, str(folder))
    import main as M                                            # their main.py (its top-level imports only; disalign() is not called)
    feat_dim = make_backbone(cfg.model, fed.in_channels, fed.img_size).feature_dim

    class FedLTCNNFeature(nn.Module):
        "The package's CNN backbone under a linear classifier, returning (feature, logits) as their ResNet_cifar_feature."
        def __init__(self, num_classes=10, **kw):
            super().__init__()
            self.backbone = make_backbone(cfg.model, fed.in_channels, fed.img_size)
            self.classifier = nn.Linear(self.backbone.feature_dim, num_classes)
        def forward(self, x):
            feature = self.backbone(x)
            return feature, self.classifier(feature)
    M.ResNet_cifar_feature = FedLTCNNFeature

    their_init = M.Ensemble_highway.__init__
    def highway_init(self):
        "Their Ensemble_highway.__init__, then its gate sized for the CNN's feature (their Linear(256, 1) is for their ResNet's)."
        their_init(self)
        self.classifier2 = nn.Linear(in_features=feat_dim, out_features=1)
    M.Ensemble_highway.__init__ = highway_init
    if variant == 'logweights':                                  # a diagnostic, not their code: ours' normalisation of the client weights
        def forward(self, step, clients_feature, clients_logit, new_logit):
            "Their Ensemble_highway.forward with the weights sigmoid(a_k) / sum_j sigmoid(a_j) computed as softmax_k(logsigmoid(a_k)) (finite when every sigmoid underflows)."
            a = torch.cat([torch.mm(one_logit, self.ensemble_scale) + self.ensemble_bias for one_logit in clients_logit], dim=1)
            all_logits_weight_norm = torch.softmax(F.logsigmoid(a), dim=1).t()
            weighted_logits = sum([one_weight.view(-1, 1) * one_logit for one_logit, one_weight in zip(clients_logit, all_logits_weight_norm)])
            avg_weight = ([1.0 / 8] * 8)
            weighted_feature = sum([one_weight * one_feature for one_feature, one_weight in zip(clients_feature, avg_weight)])
            calibration_logit = weighted_logits * self.logit_scale + self.logit_bias
            carry_gate_sigmoid = torch.sigmoid(self.classifier2(weighted_feature))
            return carry_gate_sigmoid * calibration_logit + (1 - carry_gate_sigmoid) * new_logit
        M.Ensemble_highway.forward = forward
    elif variant: sys.exit(f'--variant {variant!r}: only logweights')

    class WatchedCE(nn.CrossEntropyLoss):
        "Their CrossEntropyLoss, its value noted (server: the stage by the call count of the round)."
        server = False
        def forward(self, input, target):
            out = super().forward(input, target); W.loss(out, self.server); return out
    M.CrossEntropyLoss = WatchedCE
    M.SGD = functools.partial(torch.optim.SGD, momentum=float(cfg.momentum), weight_decay=float(cfg.weight_decay))
    M.tqdm = lambda it, *a, **k: it
    return M


def their_args(M, cfg: FedConfig):
    "options.args_parser()'s defaults with the cell's settings."
    argv = sys.argv; sys.argv = [argv[0]]
    try: args = M.args_parser()
    finally: sys.argv = argv
    hp = cfg.hp or {}
    args.num_clients, args.num_online_clients, args.num_rounds = int(cfg.clients), max(1, int(cfg.clients * cfg.frac)), int(cfg.rounds)
    args.num_epochs_local_training, args.batch_size_local_training, args.lr_local_training = int(cfg.local_epochs), int(cfg.batch_size), float(cfg.lr)
    args.seed, args.device = int(cfg.seed), 'cpu'
    args.ld = float(hp.get('ld', args.ld)); args.temperature = float(hp.get('temperature', args.temperature))
    args.lr_global_teaching = float(hp.get('server_lr', args.lr_global_teaching)); args.mini_batch_size = int(hp.get('server_batch', args.mini_batch_size))
    for k in ('ft_steps', 'calib_steps', 'distill_steps', 'server_wd'):
        if k in hp: sys.exit(f"hp.{k}: their code hard-codes it (100 steps a stage, weight decay 0.0002)")
    return args


def _their_logits(model, x, bs=1000):
    was = model.training; model.eval()
    with torch.no_grad(): z = torch.cat([model(x[i:i + bs])[1] for i in range(0, len(x), bs)])
    model.train(was); return z


def run_theirs(folder, commit, config, out, rounds=None, sets=(), variant=None):
    head = check_commit(folder, commit); folder = Path(folder).resolve()
    cfg = with_changes(config, rounds, sets)
    fed = make_fed_data(**cfg.data_args())
    if not getattr(fed, 'has_server', False): sys.exit("the cell has no server set (server_per_class): their server needs its labelled balanced set")
    if fed.num_classes != 10: sys.exit("their Ensemble_highway hard-codes 10 classes")
    M = patch_theirs(folder, cfg, fed, variant)
    from Dataset.dataset import Indices2Dataset
    args = their_args(M, cfg)
    torch.manual_seed(cfg.seed); np.random.seed(cfg.seed); random.seed(cfg.seed)   # their __main__'s seeding, with the cell's seed
    torch.backends.cudnn.deterministic = True

    data_local_training = TensorSet(fed.x_train, fed.y_train)
    data_global_test = TensorSet(fed.x_test, fed.y_test)
    indices2data_teach = TensorSet(fed.x_server, fed.y_server)                 # their dataset_global_teaching
    unlabeled_data = TensorSet(fed.x_server, torch.full_like(fed.y_server, -1))  # in place of CIFAR-100: labels unused
    list_client2indices = [fed.train_idx[k].tolist() for k in range(cfg.clients)]

    global_model = M.Global(dataset_global_teaching=indices2data_teach, num_classes=args.num_classes, total_steps=args.total_steps,
                            mini_batch_size=args.mini_batch_size, mini_batch_size_unlabled=args.mini_batch_size_unlabeled,
                            lr_global_teaching=args.lr_global_teaching, temperature=args.temperature, device=args.device,
                            seed=args.seed, server_steps=args.server_steps, num_online_clients=args.num_online_clients,
                            ld=args.ld, ensemble_ld=args.ensemble_ld, unlabeled_data=unlabeled_data)
    global_model.ce_loss.server = True
    def hook(tag):
        def f(mod, inp, out):
            z = out[1] if isinstance(out, tuple) else out
            if not _finite(z): W.note(f'{tag}: non-finite output ({W.stage or "server"})')
        return f
    def teacher_hook(mod, inp, out):
        "Their teacher's output: when non-finite, whether its client weights were 0/0 (every client's sigmoid(z_k . s + b) is 0 in float32)."
        if _finite(out): return
        with torch.no_grad():
            a = torch.cat([torch.mm(z, mod.ensemble_scale) + mod.ensemble_bias for z in inp[2]], dim=1)     # (N, clients)
            zero = (torch.sigmoid(a) == 0).all(1)
        W.note(f'teacher logits: non-finite output; its client weights 0/0 on {int(zero.sum())} of {len(a)} images '
               f'(every sigmoid(z_k . s + b) = 0; largest a_k there {float(a[zero].max(1).values.max()) if zero.any() else float("nan"):.1f}), '
               f'client logits finite: {all(_finite(z) for z in inp[2])}, parameters finite: {all(_finite(p) for p in mod.parameters())}')
    global_model.highway_model.register_forward_hook(teacher_hook)
    global_model.model.register_forward_hook(hook('global model logits'))

    rows, trace, diverged = [], [], None
    t0 = time.time()
    for r in range(1, args.num_rounds + 1):                                      # their disalign() loop, the sampling replaced
        W.new_round()
        dict_global_params = global_model.download_params()
        online_clients = sample_clients(cfg.clients, cfg.frac, cfg.seed, r)
        list_dicts_local_params = []
        list_nums_local_data = []
        for client in online_clients:
            W.stage = f'client {client}'
            indices2data = Indices2Dataset(data_local_training)
            indices2data.load(list_client2indices[client])
            data_client = indices2data
            list_nums_local_data.append(len(data_client))
            local_model = M.Local(global_params=copy.deepcopy(dict_global_params), data_client=data_client, num_classes=args.num_classes,
                                  num_epochs_local_training=args.num_epochs_local_training, batch_size_local_training=args.batch_size_local_training,
                                  lr_local_training=args.lr_local_training, device=args.device)
            local_model.train(round=r)
            dict_local_params = copy.deepcopy(local_model.upload_params())
            list_dicts_local_params.append(dict_local_params)
            bad = _bad_keys(dict_local_params)
            if bad: W.note(f'client {client}: non-finite weights {bad[:3]}')
        W.stage = None
        n = sum(list_nums_local_data)
        avg = {k: sum(d[k].float() * m for d, m in zip(list_dicts_local_params, list_nums_local_data)) / n for k in list_dicts_local_params[0]}
        global_model.update_distillation_highway_feature(r, copy.deepcopy(list_dicts_local_params), list_nums_local_data,
                                                         data_global_test, args.batch_size_test)
        for tag, st in (('global model', global_model.dict_global_params), ('fine-tuned copy', global_model.model2.state_dict()),
                        ('teacher', global_model.highway_model.state_dict())):
            bad = _bad_keys(st)
            if bad: W.note(f'{tag}: non-finite {bad[:3]}')
        zs = _their_logits(global_model.model, fed.x_server)
        cl = [v for k, v in W.losses.items() if k and k.startswith('client')]
        cm = [float(np.mean(v)) for v in cl]
        hw = global_model.highway_model
        trace.append(dict(round=r, their_test_acc=100 * global_model.epoch_acc[-1], client_loss_mean=float(np.mean(cm)), client_loss_max=float(np.max(cm)),
                          server_ce=float(F.cross_entropy(zs, fed.y_server)), server_max_logit=float(zs.abs().max()),
                          teacher_scale_max=float(hw.logit_scale.detach().max()), teacher_ens_scale_norm=float(hw.ensemble_scale.detach().norm()),
                          **{f'{s}_loss_mean': float(np.mean(W.losses[s])) for s in STAGES if s in W.losses},
                          **_norms(avg, 'avg'), **_norms(global_model.dict_global_params, 'distilled')))
        print(f"round {r}: their test acc {trace[-1]['their_test_acc']:.2f}, client loss {trace[-1]['client_loss_mean']:.4f}, "
              f"server max logit {trace[-1]['server_max_logit']:.1f}, teacher scale max {trace[-1]['teacher_scale_max']:.3f}", flush=True)
        if W.events:
            diverged = dict(round=r, what=list(W.events)); print('diverged:', diverged, flush=True); break
        if r in EVAL_ROUNDS(cfg.rounds):
            rows.append(gm_row(r, _their_logits(global_model.model, fed.x_test), fed))
    dt = time.time() - t0
    arguments = {k: v for k, v in vars(args).items() if not k.startswith('path_')}
    extra = dict(variant=variant, diverged=diverged, trace=trace, unlabeled='the server set images (their CIFAR-100 has no counterpart)',
                 pm_definition='their code has no personalised model')
    if rows:
        save_theirs(out, repository=REPO, commit=head, cfg=cfg, rows=rows, wall_s=dt, arguments=arguments, **extra)
    else:
        res = dict(side='theirs', command=COMMAND(), environment=ENV(), repository=REPO, commit=head, config=cfg.key(), arguments=arguments,
                   rounds=cfg.rounds, rows=rows, summary=None, wall_s=round(dt, 1), **extra)
        atomic_write(out, json.dumps(res, indent=1, default=str))
    print('diverged:', diverged)


# ---------------------------------------------------------------- ours
def run_ours_traced(config, out, rounds=None, sets=(), variant=None):
    "Our engine on the same config, with the per-round trace of scripts/fedic_trace.py and the divergence caught and recorded."
    from fedloge_nb.fedic import FedIC
    from fedloge_nb.federated import FedAvg
    from fedloge_nb.engine import run_fl
    from fedloge_nb.registry import make_algorithm
    from fedloge_nb.guards import DivergenceError

    class Traced(FedIC):
        "FedIC, unchanged, with a per-round record of what its server did."
        def aggregate(self, gstate, results):
            avg = FedAvg.aggregate(self, gstate, results)
            new = super().aggregate(gstate, results)
            self.server_net.load_state_dict(new, strict=False); self.server_net.eval()
            self.record(avg, new, results)
            return new

        def record(self, avg, out, results):
            "One trace row: the clients' losses, the server model's CE and largest logit on its set, the teacher's scales, weight norms."
            with torch.no_grad(): z = self.server_net(self.xs)
            losses = [r.loss for r in results]
            self.trace.append(dict(round=self.rounds_done, client_loss_mean=float(np.mean(losses)), client_loss_max=float(np.max(losses)),
                                   server_ce=float(F.cross_entropy(z, self.ys)), server_max_logit=float(z.abs().max()),
                                   teacher_scale_max=float(self.teacher.logit_scale.detach().max()),
                                   teacher_ens_scale_norm=float(self.teacher.ens_scale.detach().norm()),
                                   **_norms(avg, 'avg'), **_norms(out, 'distilled')))

    class KeepAdam(Traced):
        "A diagnostic, not the chapter's method: its three server stages with Adam states kept across rounds, as the authors' three optimisers."
        def aggregate(self, gstate, results):
            from fedloge_nb.fedic import client_outputs, _pick, distill_loss
            from fedloge_nb.federated import shared
            avg = FedAvg.aggregate(self, gstate, results)
            new = dict(avg); hp = self.hp
            if not hasattr(self, 'ft_net'):
                self.ft_net = copy.deepcopy(self.server_net)
                self.opt_ft = torch.optim.Adam(self.ft_net.parameters(), lr=hp['server_lr'], weight_decay=hp['server_wd'])
                self.opt_t = torch.optim.Adam(self.teacher.parameters(), lr=hp['server_lr'])
                self.opt_s = torch.optim.Adam(self.server_net.parameters(), lr=hp['server_lr'], weight_decay=hp['server_wd'])
            from fedloge_nb.federated import derive_seed
            g = torch.Generator().manual_seed(derive_seed(self.seed, 'fedic', 'server', self.rounds_done)); self.rounds_done += 1
            feats, logits = client_outputs(self.ft_net, [r.state for r in results], self.xs)
            m = self.ft_net; m.load_state_dict(new, strict=False); m.train()
            for _ in range(int(hp['ft_steps'])):
                i = _pick(len(self.ys), hp['server_batch'], g, self.ys.device)
                loss = F.cross_entropy(m(self.xs[i]), self.ys[i]); self.opt_ft.zero_grad(set_to_none=True); loss.backward(); self.opt_ft.step()
            m.eval()
            with torch.no_grad(): zg = m(self.xs)
            for _ in range(int(hp['calib_steps'])):
                i = _pick(len(self.ys), hp['server_batch'], g, self.ys.device)
                loss = F.cross_entropy(self.teacher(feats[:, i], logits[:, i], zg[i]), self.ys[i]); self.opt_t.zero_grad(set_to_none=True); loss.backward(); self.opt_t.step()
            with torch.no_grad(): zt = self.teacher(feats, logits, zg)
            s = self.server_net; s.load_state_dict(new, strict=False); s.train()
            for _ in range(int(hp['distill_steps'])):
                i = _pick(len(self.ys), hp['server_batch'], g, self.ys.device)
                loss = distill_loss(s(self.xs[i]), zt[i], self.ys[i], hp['temperature'], hp['ld']); self.opt_s.zero_grad(set_to_none=True); loss.backward(); self.opt_s.step()
            s.eval(); out = {k: v for k, v in shared(s, self.is_shared).items() if k in new}
            self.record(avg, out, results)                          # s is self.server_net
            return out

    cfg = dataclasses.replace(with_changes(config, rounds, sets), eval_every=10)
    fed = make_fed_data(**cfg.data_args())
    if variant not in (None, 'keep_adam'): sys.exit(f'--variant {variant!r}: only keep_adam')
    base = make_algorithm(cfg); algo = (KeepAdam if variant else Traced)(**base.hp); algo.trace = []
    work = Path(tempfile.mkdtemp(prefix='fedic_ours_'))
    diverged, t0 = None, time.time()
    try: run_fl(cfg, fed, out=work/'run', progress=False, algo=algo)
    except DivergenceError as e:
        import re
        m = re.search(r'round (\d+) \((.*)\): ', str(e))
        diverged = dict(round=int(m.group(1)) if m else None, what=[m.group(2) if m else str(e)], error=str(e))
    dt = time.time() - t0
    import pandas as pd
    h = pd.read_csv(work/'run'/'history.csv').to_dict('records') if (work/'run'/'history.csv').exists() else []
    rows = [dict(round=int(x['round']), gm_acc=x['gm_acc'], gm_many=x['gm_many'], gm_med=x['gm_med'], gm_few=x['gm_few'], pm_acc=x.get('pm_acc'))
            for x in h if x.get('gm_acc') == x.get('gm_acc')]
    res = dict(side='ours', variant=variant, command=COMMAND(), environment=ENV(), config=cfg.key(), hp=dict(algo.hp), rounds=cfg.rounds, rows=rows,
               summary=summarise(rows) if rows else None, final_summary=None, wall_s=round(dt, 1), diverged=diverged, trace=algo.trace,
               pm_definition="every client's personalised model (p_epochs) on its local test set, after training")
    atomic_write(out, json.dumps(res, indent=1, default=str)); print('diverged:', diverged)


# ---------------------------------------------------------------- tables
def write_table(folder, out, cell_dir=None):
    "The comparison as markdown (`common.write_table`) with FedIC's setting."
    c = json.loads(next(Path(folder).glob('ours_*.json')).read_text())['config']
    setting = (f"Setting: the leaderboard's stage 2 at {c['dataset']} IF {c['imb_factor']}, Dirichlet alpha {c['alpha']} (FedIC's global cells, at the "
               f"lr {c['lr']} the leaderboard's divergence rule moved it to, lambda {c['hp'].get('ld', 0.5)} as validation chose for GM): {c['clients']} clients, "
               f"frac {c['frac']}, {c['rounds']} rounds x {c['local_epochs']} local epoch, batch {c['batch_size']}, lr {c['lr']}, momentum {c['momentum']}, "
               f"weight decay {c['weight_decay']}, val_frac {c.get('val_frac', 0)}, a server set of {c.get('server_per_class')} images per class.")
    note = ("Their unlabelled distillation set (CIFAR-100) has no counterpart here: both sides distil on the server set's images "
            "(theirs draws 128 of them a step for the KL term and 20 labelled ones for the CE term; ours one batch of 20 for both).")
    variants = {json.loads(p.read_text()).get('variant') for p in Path(folder).glob('theirs_*.json')}
    extra = []
    un = sorted((r['config']['lr'], r['config']['seed'], r.get('diverged')) for r in (json.loads(p.read_text()) for p in (Path(folder)/'lr').glob('theirs_*.json')) if not r.get('variant'))
    unmodified = ', '.join(f"lr {lr} seed {sd}: " + (f"round {d['round']}, first {d['what'][0]}" if d else 'finished') for lr, sd, d in un) or 'no unmodified run'
    if 'logweights' in variants:
        extra = ['', "**Their side here is their code with one line changed** (`--variant logweights`): their `Ensemble_highway` normalises the "
                 "client weights as sigmoid(a_k) / sum_j sigmoid(a_j), which is 0/0 once every client's a_k = z_k . s + b is below about -88.7 "
                 "(float32's sigmoid on the CPU is 0 there), and unmodified it went non-finite on this split "
                 f"({unmodified}; `divergence.md`). The variant computes the same weights as softmax_k(logsigmoid(a_k)) "
                 "(equal wherever the ratio is finite; ours' normalisation, chapter 08m), and nothing else of their code changes."]
    return common_table(folder, out, method='FedIC', script='scripts/peers/fedic.py', setting=setting, cell_dir=cell_dir, pm_note=note, extra_lines=extra)


def write_divergence(folder, out):
    "Which runs of FOLDER (its JSONs and those of FOLDER/lr) diverged, where and on what, and their traces side by side, as markdown."
    folder = Path(folder)
    runs = []
    for p in sorted(list(folder.glob('*.json')) + list((folder/'lr').glob('*.json'))):
        r = json.loads(p.read_text()); r['_path'] = str(p); runs.append(r)
    f = lambda x, d=2: '-' if x is None or (isinstance(x, float) and not math.isfinite(x)) else f'{x:.{d}f}'
    key = lambda r: (r['config']['lr'], r['config']['seed'], r['side'], r.get('variant') or '')
    side = lambda r: r['side'] + (f" + {r['variant']}" if r.get('variant') else '')
    lines = ["# FedIC: does the authors' code diverge where ours does?", '',
             f"Setting: the leaderboard's FedIC cell at {runs[0]['config']['dataset']} IF {runs[0]['config']['imb_factor']}, Dirichlet alpha "
             f"{runs[0]['config']['alpha']}, lambda {runs[0]['config']['hp'].get('ld', 0.5)}, a server set of {runs[0]['config'].get('server_per_class')} "
             "images per class, at the client lr of the leaderboard's screen (0.05, 0.02, 0.01; momentum 0.5), ours (the package's engine) and theirs "
             "(the authors' code through `scripts/peers/fedic.py`, whose docstring says what was replaced). A run stops at the first round with a "
             "non-finite loss, output or weight; `what` lists the first non-finite values of that round in the order they appeared.", '',
             '| lr | seed | side | diverged in round | what went non-finite first | GM at the last evaluation before | wall s | JSON |', '|---|---|---|---|---|---|---|---|']
    for r in sorted(runs, key=key):
        d = r.get('diverged'); last = r['rows'][-1] if r['rows'] else None
        what = '; '.join(d['what'][:2]) if d else ('none' if 'diverged' in r else 'none (finished)')
        lines.append(f"| {r['config']['lr']} | {r['config']['seed']} | {side(r)} | {d['round'] if d else 'no (%d rounds)' % r['rounds']} | {what} | "
                     f"{f(last['gm_acc']) + ' (round %d)' % last['round'] if last else '-'} | {r['wall_s']:.0f} | `{r['_path']}` |")
    traced = [r for r in sorted(runs, key=key) if r.get('trace')]
    cols = [('client_loss_max', 'largest client loss', 3), ('server_ce', "distilled model's CE on the server set", 3),
            ('server_max_logit', 'its largest abs logit there', 1), ('teacher_scale_max', "teacher's largest scale a", 2),
            ('distilled_backbone.fc1', 'fc1 weight norm', 1)]
    for c, name, dd in cols:
        lines += ['', f"Trace, {name} (`{c}`), every 10th round and the last:", '']
        rounds = sorted({t['round'] for r in traced for t in r['trace'] if t['round'] % 10 == 0} | {r['trace'][-1]['round'] for r in traced})
        lines += ['| lr, seed, side | ' + ' | '.join(str(x) for x in rounds) + ' |', '|---' * (len(rounds) + 1) + '|']
        for r in traced:
            tr = {t['round']: t for t in r['trace']}
            lines.append(f"| {r['config']['lr']}, {r['config']['seed']}, {side(r)} | " + ' | '.join(f(tr[x].get(c), dd) if x in tr else '' for x in rounds) + ' |')
    notes = folder/'divergence_notes.md'
    if notes.exists(): lines += ['', notes.read_text().strip()]
    lines += ['', 'Commands (repository root), each JSON records its own:', ''] + [f"- `{r['command']}`" for r in sorted(runs, key=key)]
    lines += [f"- this file: `.venv/bin/python {' '.join(sys.argv)}`"]
    atomic_write(out, '\n'.join(lines) + '\n'); print('\n'.join(lines))


def check_pieces(folder, commit):
    "Their Ensemble_highway and Eq. 4 loss beside ours on the same inputs and parameters (no training): do the pieces compute the same numbers?"
    check_commit(folder, commit); sys.path.insert(0, str(Path(folder).resolve()))
    import main as M
    from fedloge_nb.fedic import CalibratedEnsemble, distill_loss
    torch.manual_seed(0)
    h = M.Ensemble_highway(); h.classifier2 = nn.Linear(84, 1)
    with torch.no_grad():
        h.ensemble_scale.normal_(); h.ensemble_bias.normal_(); h.logit_scale.uniform_(0.5, 2); h.logit_bias.normal_()
    ours = CalibratedEnsemble(10, 84)
    with torch.no_grad():
        ours.ens_scale.copy_(h.ensemble_scale[:, 0]); ours.ens_bias.copy_(h.ensemble_bias); ours.logit_scale.copy_(h.logit_scale)
        ours.logit_bias.copy_(h.logit_bias); ours.gate.weight.copy_(h.classifier2.weight); ours.gate.bias.copy_(h.classifier2.bias)
    for m in (8, 10):
        feats = [torch.rand(32, 84) for _ in range(m)]; logits = [5 * torch.randn(32, 10) for _ in range(m)]; zg = 5 * torch.randn(32, 10)
        a = h(0, feats, logits, zg); b = ours(torch.stack(feats), torch.stack(logits), zg)
        print(f'{m} clients: teacher logits, largest |theirs - ours| = {(a - b).abs().max():.2e}')
    far = [z - 30 for z in logits]                                         # every a_k = sum of a client's logits + b below -89, where float32 sigmoid is 0
    with torch.no_grad(): h.ensemble_scale.fill_(1.); ours.ens_scale.fill_(1.)
    print(f's = 1 (their initial value) and client logits 30 lower: theirs finite {bool(torch.isfinite(h(0, feats, far, zg)).all())}, ours finite {bool(torch.isfinite(ours(torch.stack(feats), torch.stack(far), zg)).all())}')
    zs, zt, y = torch.randn(20, 10), 5 * torch.randn(20, 10), torch.randint(0, 10, (20,))
    theirs = 0.5 * F.kl_div(F.log_softmax(zs / 2, 1), F.softmax(zt / 2, 1).detach(), reduction='batchmean') + 0.5 * F.cross_entropy(zs, y)
    print(f'Eq. 4 on one batch (their lines of update_distillation_highway_feature, ld 0.5, T 2): |theirs - ours| = {(theirs - distill_loss(zs, zt, y, 2.0, 0.5)).abs():.2e}')


if __name__ == '__main__':
    p, sub, t = adapter_cli(__doc__)
    t.add_argument('--variant', default=None, help="logweights: a diagnostic, their teacher's client weights normalised as ours (log space)")
    o = sub.add_parser('ours'); o.add_argument('config'); o.add_argument('out'); o.add_argument('--rounds', type=int, default=None)
    o.add_argument('--set', action='append', default=[])
    o.add_argument('--variant', default=None, help='keep_adam: a diagnostic, the server stages with Adam states kept across rounds (as the authors\' code)')
    d = sub.add_parser('divergence'); d.add_argument('folder'); d.add_argument('out')
    k = sub.add_parser('check'); k.add_argument('folder'); k.add_argument('commit')
    a = p.parse_args()
    if a.side == 'theirs': run_theirs(a.folder, a.commit, a.config, a.out, a.rounds, a.set, a.variant)
    elif a.side == 'ours': run_ours_traced(a.config, a.out, a.rounds, a.set, a.variant)
    elif a.side == 'table': write_table(a.folder, a.out, a.cell)
    elif a.side == 'check': check_pieces(a.folder, a.commit)
    else: write_divergence(a.folder, a.out)
