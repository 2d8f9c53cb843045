"""FedReLa by its authors' code (guangzhengh/FedReLa) beside ours, on both of its bases: FedLoGe+ReLa (`fedloge.py`) and
FedETF+ReLa (`fed_etf.py`), each base trained by their code too, on the same data, model and client sampling.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/peers/fedrela.py theirs FOLDER COMMIT CONFIG.json OUT.json [--rounds N] [--set k=v ...]
    OMP_NUM_THREADS=1 .venv/bin/python scripts/peers/common.py ours CONFIG.json OUT.json [--rounds N]
    .venv/bin/python scripts/peers/fedrela.py table FOLDER OUT.md [--cell CELL_DIR_OF_SEED_0]

FOLDER is a checkout of https://github.com/guangzhengh/FedReLa at COMMIT (checked with git; its code is run, never copied
into this repository). CONFIG.json is a leaderboard cell's `config.json` of `fedloge+rela` or `fedetf+rela` (e.g.
`results/sweeps/leaderboard_if100/fmnist_if100_a0.5_fedloge+rela_rela_top2.5_s0/config.json`); the cell's method picks
their script (`fedloge+rela`: `fedloge.py`; `fedetf+rela`: `fed_etf.py`). Both sides use the cell's data arguments,
seed, rounds, clients, frac, batch size, lr, momentum (weight decay 0: their SGD has none) and FedReLa's settings: their
`--thre` is the cell's `rela_top`, `--relabel_start` is floor(rela_start x rounds) (0-based round index: with 0.8 and 100
rounds, 80, i.e. rounds 81-100 are relabelled on both sides), `--relabel_period` is `rela_period`; their relabelled
rounds train at 0.1 x lr, hard-coded, which is our `rela_lr_scale` default (another value is refused).

Their script runs whole (their argument parser, seeding, SSE-C solve or ETF classifier, `LocalUpdate.update_weights_gaux`
/ `update_weights_etf` with the relabelling of `util/FedReLa.py`, their size-weighted FedAvg of backbone and g_aux, their
per-client local heads), executed from its own source file with only these changes:

- data: `util.dataset.myDataset` is replaced by a class with their interface (`get_imbalanced_dataset` returning
  train set, test set, `dict_users`, `dict_localtest`; `args.device`; the distributions their tests read) holding the
  package's long-tailed training pool, client training indices, local test sets and balanced test set
  (`fedloge_nb.data.make_fed_data` for the cell's data arguments, so the same seed gives the same split). Their code
  builds CIFAR-LT with torchvision and partitions it itself; the comparison needs the package's split. The balanced
  test set is handed over in a fixed shuffled order (seed 0): their FedETF evaluation runs the ETF head's BatchNorm on
  batches of 100 test images in train mode (see below), and the package's test set is ordered by class, which CIFAR's is
  not.
- model: `model.build_model.build_model` returns the package's CNN backbone (`make_backbone`, the leaderboard's `cnn`)
  under a linear layer `linear`, with their ResNet's `forward(x, latent_output)` (features when `latent_output`). Their
  heads (the frozen SSE-C `g_head` with its 10,000-step solve, the ETF classifier, `g_aux`, the local heads) are built by
  their script on its `in_features`.
- client sampling: three source lines are changed (each must match exactly once, else the run stops): their scripts set
  `fedavg_align_weights_with_client = True` and train every client in every round (`args.frac = 1`); here it is `False`
  (their own branch for a sampled subset: the sampled clients train and are averaged with their sizes), `idxs_users` is
  the package's `sample_clients(clients, frac, seed, round)` (rounds from 1) instead of `np.random.choice`, and in
  `fed_etf.py`, whose loop has no such branch, the training loop runs over `idxs_users` instead of `range(num_users)`.
- early stopping: `fedloge.py` hard-codes `patience = 10` (stop 10 rounds after the last peak of test accuracy once
  relabelling has started); it is set to 0, as `fed_etf.py` reads it from `--early_stop_after_relabel_patience`
  (default 0): it selects on test data, and the comparison needs rounds 80, 90, 100.
- evaluation: their `globaltest` / `globaltest_etf` (evaluation only, called on copies) are replaced by a function that
  measures the same head on the package's balanced test set at rounds 10, 20, ..., 100 with the package's shot groups
  (`common.gm_row`) and hands their loop the accuracy it logs; their per-round local test (`localtest`,
  `localtest_etf`, evaluation only, a personalised accuracy the comparison does not use) is skipped to save CPU time.
- device: `Tensor.cuda` and `Module.cuda` return the object unchanged (their `collect_Q`, `ETF_Classifier` and
  `produce_Ew` call `.cuda()`); `--gpu -1` makes their `args.device` the CPU. Their logs, checkpoints and relabel files
  go to a fresh temporary folder (the relabel files of one run must not be read by another); `--no_plot`.
- `--sse-norm G` (a diagnostic, not the comparison): their SSE-C solve rescaled to mean column norm G (their solve
  ends at 0.1; ours is 2, the package's `gamma`); such runs are written under `diagnostics/`.
- an observer around their `relabel_local_data` (the function `util/FedReLa.py` exports, called unchanged) counts the
  relabelled samples (`rela_share` below).

What the rows hold. FedLoGe+ReLa: GM is GA-FR, the leaderboard's GM of `fedloge+rela`, as their code computes it
(`util/realign_eval.py` -> `globaltest_calibra`: g_aux's rows rescaled to norm 1.7, its bias kept); `gm_*_sse_c` is
the frozen SSE-C head, what their script reports (`global_test_head = 'g_head'`). FedETF+ReLa: GM is their
`globaltest_etf` (features through their `ETF_Classifier` head, then times its fixed ETF `ori_M`), with the head in the
mode their script leaves it (train: BatchNorm on each batch of 100 test images, as their code evaluates; their global
head's BatchNorm is never trained nor aggregated); `gm_*_bn_eval` is the same head in eval mode (BatchNorm with its
initial running statistics, what their relabelling reads). Each side's GM is its own method's: ours is Li et al.'s
FedETF (chapter 09), theirs the ETF classifier of their repository (see `nbs/09e_fedrela.ipynb`).
"""
import argparse, copy, json, os, sys, tempfile, time, types
from pathlib import Path
import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (check_commit, save_theirs, write_table as common_table, with_changes, TensorSet, EVAL_ROUNDS, gm_row, adapter_cli)
from fedloge_nb.federated import FedConfig, sample_clients
from fedloge_nb.data import make_fed_data
from fedloge_nb.models import make_backbone

SCRIPTS = {'fedloge+rela': 'fedloge.py', 'fedetf+rela': 'fed_etf.py'}
TEST_ORDER_SEED = 0


def replace_once(src: str, old: str, new: str, where: str) -> str:
    "`src` with `old` replaced by `new`, which must occur exactly once."
    n = src.count(old)
    if n != 1: sys.exit(f"{where}: expected one occurrence of {old!r}, found {n}: their code changed, the adapter needs a look")
    return src.replace(old, new)


def their_source(folder: Path, script: str) -> str:
    "Their script's source with the client-sampling and early-stopping lines changed (nothing else)."
    src = (folder/script).read_text()
    src = replace_once(src, 'fedavg_align_weights_with_client = True', 'fedavg_align_weights_with_client = False', script)
    src = replace_once(src, 'idxs_users = np.random.choice(range(args.num_users), m, replace=False, p=prob)',
                       'idxs_users = np.array(SAMPLE_CLIENTS(rnd + 1))', script)
    if script == 'fedloge.py':
        src = replace_once(src, 'patience = 10#int(', 'patience = 0#int(', script)
    else:
        src = replace_once(src, '        for client_id in range(args.num_users):\n            if len(dict_users[client_id]) == 0:',
                           '        for client_id in idxs_users:\n            if len(dict_users[client_id]) == 0:', script)
    return src


class FedLTCNN(nn.Module):
    "The package's CNN backbone under a linear layer, with their ResNet's forward(x, latent_output). At module level: their checkpoints pickle it."
    def __init__(self, num_classes, model='cnn', in_channels=1, img_size=28):
        super().__init__()
        self.backbone = make_backbone(model, in_channels, img_size)
        self.linear = nn.Linear(self.backbone.feature_dim, num_classes)
    def forward(self, x, latent_output=False):
        out = self.backbone(x)
        x1 = self.linear(out)
        return out if latent_output else x1


def run_theirs(folder, commit, config, out, rounds=None, sets=(), sse_norm=None):
    head = check_commit(folder, commit); folder = Path(folder).resolve()
    cfg = with_changes(config, rounds, sets)
    if cfg.method not in SCRIPTS: sys.exit(f"the cell's method {cfg.method!r}: this adapter runs {', '.join(SCRIPTS)}")
    if cfg.lr_schedule != 'exp' or cfg.lr_decay != 1: sys.exit("their scripts train at a constant lr: the cell's lr schedule has no counterpart")
    if cfg.weight_decay: sys.exit("their SGD has no weight decay: the cell's weight_decay must be 0")
    from fedloge_nb.fedrela import ReLaPlugin
    hp = {k: v.default for k, v in ReLaPlugin.hparams.items()} | {k: v for k, v in cfg.hp.items() if k in ReLaPlugin.hparams}
    if float(hp['rela_lr_scale']) != 0.1: sys.exit("their relabelled rounds train at 0.1 x lr, hard-coded: rela_lr_scale must be 0.1")
    relabel_start = int(float(hp['rela_start']) * cfg.rounds)       # 0-based round index = ours' start_round - 1
    fed = make_fed_data(**cfg.data_args())
    script = SCRIPTS[cfg.method]; base = 'etf' if cfg.method == 'fedetf+rela' else 'loge'

    # ---- device: their .cuda() calls become no-ops on the CPU
    torch.Tensor.cuda = lambda self, *a, **k: self
    nn.Module.cuda = lambda self, *a, **k: self

    sys.path.insert(0, str(folder))
    work = Path(tempfile.mkdtemp(prefix=f'fedrela_{base}_theirs_'))
    cwd = os.getcwd(); os.chdir(work)
    import util.dataset as UD, util.update_baseline as UB, model.build_model as MB

    # ---- data
    perm = torch.randperm(len(fed.y_test), generator=torch.Generator().manual_seed(TEST_ORDER_SEED))
    inv = torch.empty_like(perm); inv[perm] = torch.arange(len(perm))
    train_set, test_set = TensorSet(fed.x_train, fed.y_train), TensorSet(fed.x_test[perm], fed.y_test[perm])
    C = fed.num_classes

    class FedLTDataset:
        "Their myDataset's interface over the package's split (test indices mapped to the shuffled order)."
        def __init__(self, args): self.m_args = args
        def get_args(self): return self.m_args
        def get_imbalanced_dataset(self, args):
            args.device = torch.device('cpu'); args.num_classes = C
            dict_users = {k: [int(i) for i in fed.train_idx[k]] for k in range(cfg.clients)}
            dict_localtest = {k: set(inv[torch.as_tensor(fed.test_idx[k], dtype=torch.long)].tolist()) for k in range(cfg.clients)}
            self.training_set_distribution = np.array([np.bincount(fed.y_train[dict_users[k]].numpy(), minlength=C) for k in range(cfg.clients)])
            self.local_test_distribution = np.array([np.bincount(test_set.targets[list(dict_localtest[k])].numpy(), minlength=C) for k in range(cfg.clients)])
            self.global_test_distribution = self.local_test_distribution.sum(0)
            return train_set, test_set, dict_users, dict_localtest
        get_balanced_dataset = get_imbalanced_dataset
    UD.myDataset = FedLTDataset

    # ---- model
    MB.build_model = lambda args: FedLTCNN(args.num_classes, cfg.model, fed.in_channels, fed.img_size).to(args.device)

    # ---- evaluation (on copies, as their globaltest) and the relabel observer
    ns = {'__name__': '__main__', '__file__': str(folder/script), 'SAMPLE_CLIENTS': lambda r: sample_clients(cfg.clients, cfg.frac, cfg.seed, r)}
    evals, rows, last, relabels = set(EVAL_ROUNDS(cfg.rounds)), [], {'out': (0.0, {'head': 0.0, 'middle': 0.0, 'tail': 0.0})}, []
    calls, modes = {'round': 0}, set()

    def logits_of(f):
        "Logits of f on the test set in their loader's order (batches of 100), returned in the package's order."
        with torch.no_grad(): z = torch.cat([f(test_set.x[i:i + 100]) for i in range(0, len(perm), 100)]).float()
        return z[inv]

    def shots3(row):
        return (row['gm_acc'] / 100, {'head': row['gm_many'] / 100, 'middle': row['gm_med'] / 100, 'tail': row['gm_few'] / 100})

    def globaltest_loge(net, g_head, test_dataset, args, dataset_class=None, head_switch=True):
        calls['round'] += 1; r = calls['round']
        if r not in evals: return last['out']
        net.eval()
        sse = gm_row(r, logits_of(lambda x: g_head(net(x, latent_output=True))), fed)
        g_aux = copy.deepcopy(ns['g_aux'])                                  # their globaltest_calibra: rows to norm 1.7, bias kept
        g_aux.weight = torch.nn.Parameter(g_aux.weight * (1.7 / torch.norm(g_aux.weight, dim=1)).view(-1, 1))
        ga = gm_row(r, logits_of(lambda x: g_aux(net(x, latent_output=True))), fed)
        rows.append({**ga, **{f'{k}_sse_c': v for k, v in sse.items() if k.startswith('gm_')}})
        last['out'] = shots3(sse); return last['out']

    def globaltest_etf(net, g_head, test_dataset, args, dataset_class=None, head_switch=True):
        calls['round'] += 1; r = calls['round']
        if r not in evals: return last['out']
        net.eval()
        ge = copy.deepcopy(g_head).eval()
        bn_eval = gm_row(r, logits_of(lambda x: torch.matmul(ge(net(x, latent_output=True)), ge.ori_M)), fed)
        row = gm_row(r, logits_of(lambda x: torch.matmul(g_head(net(x, latent_output=True)), g_head.ori_M)), fed)   # their mode (train: batch statistics)
        rows.append({**row, **{f'{k}_bn_eval': v for k, v in bn_eval.items() if k.startswith('gm_')}})
        modes.add('train' if g_head.training else 'eval')
        last['out'] = shots3(row); return last['out']

    UB.globaltest, UB.globaltest_etf = globaltest_loge, globaltest_etf
    skipped = lambda *a, **k: (0.0, 0.0, 0.0, {'head': (0, 1), 'middle': (0, 1), 'tail': (0, 1)})
    UB.localtest = UB.localtest_etf = skipped
    relabel_fn = UB.fedrela_relabel_local_data
    def observed(g_head, net, net_id, args, relabel_thre, train_dataloader, class_num=100, read=False, store=False, method='loge'):
        info = relabel_fn(g_head, net, net_id, args, relabel_thre, train_dataloader, class_num, read, store, method)
        if store and info is not None: relabels.append(dict(round=calls['round'] + 1, client=int(net_id), moved=info['relabelcnt'], total=info['total_samples']))
        return info
    UB.fedrela_relabel_local_data = observed
    if sse_norm is not None:                                            # diagnostic only: their SSE-C solve, rescaled to mean column norm sse_norm
        import util.etf_methods as EM
        solve = EM.ETF_Classifier.gen_sparse_ETF
        def rescaled(self, *a, **k):
            W = solve(self, *a, **k)
            return (W * (float(sse_norm) / W.detach().norm(dim=0).mean())).detach()
        EM.ETF_Classifier.gen_sparse_ETF = rescaled

    # ---- their arguments
    argv = [script, '--dataset', cfg.dataset, '--model', cfg.model, '--num_classes', str(C), '--num_users', str(cfg.clients),
            '--frac', str(cfg.frac), '--rounds', str(cfg.rounds), '--local_ep', str(cfg.local_epochs), '--local_bs', str(cfg.batch_size),
            '--lr', str(cfg.lr), '--momentum', str(cfg.momentum), '--beta', '0', '--seed', str(cfg.seed),
            '--alpha_dirichlet', str(cfg.alpha), '--IF', str(1 / cfg.imb_factor), '--gpu', '-1', '--ghead', 'g_head',
            '--thre', str(float(hp['rela_top'])), '--relabel_start', str(relabel_start), '--relabel_period', str(int(hp['rela_period'])),
            '--id', f'FEDLT_{base.upper()}_S{cfg.seed}_', '--no_plot', '--log_dir', str(work/'logs'), '--save_epoch_milestones', '']
    old_argv = sys.argv; sys.argv = argv
    src = their_source(folder, script)
    try:
        t0 = time.time(); exec(compile(src, str(folder/script), 'exec'), ns); dt = time.time() - t0
    finally: sys.argv = old_argv; os.chdir(cwd)
    if [r['round'] for r in rows] != sorted(evals): sys.exit(f"their run evaluated rounds {[r['round'] for r in rows]}, not {sorted(evals)}")
    moved, total = sum(x['moved'] for x in relabels), sum(x['total'] for x in relabels)
    extra = dict(rela_share=(moved / total if total else 0.0), relabelled_clients=sorted({x['client'] for x in relabels}), relabels=relabels,
                 test_order_seed=TEST_ORDER_SEED, sse_norm=sse_norm, etf_head_mode_at_evaluation=sorted(modes) or None, changed_lines='see the docstring of scripts/peers/fedrela.py')
    gm_def = ("GA-FR as their globaltest_calibra (g_aux rows at norm 1.7, bias kept); gm_*_sse_c: their frozen SSE-C g_head" if base == 'loge' else
              "their globaltest_etf: ETF_Classifier head (BatchNorm in the mode their script leaves it, train) then x ori_M; gm_*_bn_eval: the head in eval mode")
    save_theirs(out, repository='https://github.com/guangzhengh/FedReLa', commit=head, cfg=cfg, rows=rows, wall_s=dt,
                arguments=dict(script=script, argv=argv[1:]), pm_definition=None, gm_definition=gm_def, **extra)


def check_relabel(folder, commit, trials=20):
    "Eq. 1-4, theirs (`util/FedReLa.py`) against ours (`fedloge_nb.fedrela.relabel`) on the same probabilities and the same uniform draws."
    head = check_commit(folder, commit); sys.path.insert(0, str(Path(folder).resolve()))
    import contextlib, io
    import util.FedReLa as FR
    from fedloge_nb.fedrela import relabel
    gen, agree, moved, n_all = np.random.default_rng(0), 0, 0, 0
    for t in range(trials):
        C = int(gen.choice([10, 100])); N = int(gen.integers(50, 1500)); top = float(gen.choice([1.0, 2.5, 5.0]))
        counts = gen.dirichlet(np.full(C, 0.3)); y = gen.choice(C, size=N, p=counts)
        logits = gen.normal(size=(N, C)) * 3 + 4 * np.eye(C)[y]
        p = np.exp(logits - logits.max(1, keepdims=True)); p = (p / p.sum(1, keepdims=True)).astype(np.float32)
        keys = [str(i) for i in range(N)]
        pred = {k: (p[i], int(y[i])) for i, k in enumerate(keys)}
        args = types.SimpleNamespace(id='check')
        with contextlib.redirect_stdout(io.StringIO()):
            priors, _ = FR.compute_normalized_priors(y, C)
            mean, std, zdict = FR.compute_classwise_statistics(p, y, keys, C)
            _, zmat = FR.zscore(pred, mean, std, zdict, 0)
            thr = FR.compute_adaptive_threshold(zmat, top, args, 0)
            np.random.seed(t); flags, *_ = FR.get_rho_with_tanh_norm(pred, zdict, priors, thr, C, args)
        theirs = torch.tensor([int(flags.get(k, y[i])) for i, k in enumerate(keys)])
        np.random.seed(t); u = torch.from_numpy(np.random.rand(N, C))        # their draws: rand(C) per sample, in order
        ours = relabel(torch.from_numpy(p), torch.from_numpy(y), torch.bincount(torch.from_numpy(y), minlength=C), top, u)
        agree += int((ours == theirs).sum()); n_all += N; moved += int((theirs != torch.from_numpy(y)).sum())
    print(f"{trials} random clients, {n_all} samples: ours and theirs give the same new label for {agree} ({100 * agree / n_all:.3f}%); "
          f"{moved} samples moved in theirs (authors' commit {head[:7]})")
    return agree, n_all


def write_table(folder, out, cell_dir=None):
    "The comparison as markdown (`common.write_table`) with FedReLa's setting and the secondary heads."
    runs = {}
    for p in sorted(Path(folder).glob('*.json')):
        r = json.loads(p.read_text()); runs.setdefault(r['config']['seed'], {})[r['side']] = r
    c = next(iter(runs.values()))['ours']['config']
    base = 'FedLoGe' if c['method'] == 'fedloge+rela' else 'FedETF'
    setting = (f"Setting: the leaderboard's stage 2 at {c['dataset']} IF {c['imb_factor']}, Dirichlet alpha {c['alpha']} (`{c['method']}` at the "
               f"variant stage 1 chose for GM, rela_top {c['hp'].get('rela_top')}): {c['clients']} clients, frac {c['frac']}, {c['rounds']} rounds x "
               f"{c['local_epochs']} local epoch, batch {c['batch_size']}, lr {c['lr']}, momentum {c['momentum']}, weight decay {c['weight_decay']}, "
               f"val_frac {c.get('val_frac', 0)}. Their side: their `{SCRIPTS[c['method']]}` (base training and relabelling).")
    seeds = sorted(k for k, v in runs.items() if {'ours', 'theirs'} <= set(v))
    f = lambda x: '-' if x is None else f'{x:.2f}'
    lines = ['', f"GM above: ours {'GA-FR (the leaderboard GM of fedloge+rela)' if base == 'FedLoGe' else 'the package FedETF (Li et al.) global model'}; "
             f"theirs {runs[seeds[0]]['theirs'].get('gm_definition')}."]
    sec = '_sse_c' if base == 'FedLoGe' else '_bn_eval'
    th = [runs[s]['theirs']['summary'].get(f'gm_acc{sec}_last3') for s in seeds]
    lines += ['', f"Theirs, the other head (`gm_acc{sec}`), GM last 3 per seed: {', '.join(f(x) for x in th)}; "
              f"many/med/few (last 3, mean over seeds): " + ' / '.join(f(np.mean([runs[s]['theirs']['summary'][f'gm_{g}{sec}_last3'] for s in seeds])) for g in ('many', 'med', 'few')) + '.']
    if cell_dir is not None and base == 'FedLoGe':
        import csv
        oc = []
        for s in seeds:
            h = list(csv.DictReader(open(Path(str(cell_dir).replace('_s0', f'_s{s}'))/'history.csv')))
            oc.append(np.mean([float(r['gm_acc_sse_c']) for r in h if r.get('gm_acc_sse_c')][-3:]))
        lines += [f"Ours, the SSE-C head from the leaderboard cells' history (the same config), GM last 3 per seed: {', '.join(f(x) for x in oc)} "
                  f"(mean {f(np.mean(oc))}, theirs {f(np.mean(th))}; theirs minus ours {np.mean(np.array(th) - np.array(oc)):+.2f})."]
    dd = [runs[s]['theirs']['summary']['gm_acc_last3'] - runs[s]['ours']['summary']['gm_acc_last3'] for s in seeds]
    sign = 'below' if max(dd) < 0 else 'above' if min(dd) > 0 else None
    lines += ['', f"Per seed, theirs minus ours (GM last 3): {', '.join(f'{x:+.2f}' for x in dd)}" +
              (f"; every seed {sign} 0: with {len(seeds)} seeds the t-interval above is wide (t = 4.30 at 2 degrees of freedom), so the rule's verdict "
               f"does not mean the two agree." if sign and len(seeds) < 5 else '.')]
    diag = sorted(Path(folder, 'diagnostics').glob('theirs_ssenorm*_s*.json')) if Path(folder, 'diagnostics').is_dir() else []
    if diag:
        dr = {json.loads(p.read_text())['config']['seed']: json.loads(p.read_text()) for p in diag}
        ds = [s for s in seeds if s in dr]
        g = lambda s, k: dr[s]['summary'][k]
        lines += ['', f"Diagnostic (`diagnostics/`, `--sse-norm {dr[ds[0]].get('sse_norm')}`: their run with only their SSE-C solve rescaled to our column norm, "
                  f"seeds {', '.join(map(str, ds))}): GM (GA-FR) last 3 {', '.join(f(g(s, 'gm_acc_last3')) for s in ds)} (mean {f(np.mean([g(s, 'gm_acc_last3') for s in ds]))}, "
                  f"ours {f(np.mean([runs[s]['ours']['summary']['gm_acc_last3'] for s in ds]))}); few (last 3) mean {f(np.mean([g(s, 'gm_few_last3') for s in ds]))} "
                  f"(ours {f(np.mean([runs[s]['ours']['summary']['gm_few_last3'] for s in ds]))}); SSE-C head last 3 {', '.join(f(g(s, 'gm_acc_sse_c_last3')) for s in ds)}."]
    nr = sorted(Path(folder, 'diagnostics').glob('theirs_norela_*_s*.json')) if Path(folder, 'diagnostics').is_dir() else []
    if nr and cell_dir is not None:
        dr = {json.loads(p.read_text())['config']['seed']: json.loads(p.read_text()) for p in nr}
        ds = [s for s in seeds if s in dr]
        base_cell = lambda s: Path(str(cell_dir).replace(f"{c['method']}_rela_top{c['hp'].get('rela_top')}", c['method'].split('+')[0]).replace('_s0', f'_s{s}'))
        ob = [json.loads((base_cell(s)/'summary.json').read_text())['gm_acc_lastk'] for s in ds]
        tb = [dr[s]['summary']['gm_acc_last3'] for s in ds]
        tr = [runs[s]['theirs']['summary']['gm_acc_last3'] for s in ds]; orr = [runs[s]['ours']['summary']['gm_acc_last3'] for s in ds]
        lines += ['', f"Diagnostic (`diagnostics/`, `--set hp.rela_start=1.0`: their base alone, no relabelling), seeds {', '.join(map(str, ds))}: GM last 3 "
                  f"{', '.join(f(x) for x in tb)} (mean {f(np.mean(tb))}); relabelling adds {np.mean(np.array(tr) - np.array(tb)):+.2f} in theirs. Ours, the base's "
                  f"leaderboard cells (`{base_cell(0).name}` and its seeds, GM last 3) {', '.join(f(x) for x in ob)} (mean {f(np.mean(ob))}); relabelling adds "
                  f"{np.mean(np.array(orr) - np.array(ob)):+.2f} in ours. Base gap, theirs minus ours: {np.mean(np.array(tb) - np.array(ob)):+.2f}."]
    rs = [runs[s]['theirs'].get('rela_share') for s in seeds]; nc = [len(runs[s]['theirs'].get('relabelled_clients', [])) for s in seeds]
    lines += ['', f"Relabelled share of the relabelling clients' samples, theirs: {', '.join(f(100 * x) + '%' for x in rs)}; clients that relabelled "
              f"(their code relabels a client only if it trains in round {int(0.8 * c['rounds']) + 1}, the store round; the others read no file and keep "
              f"their labels, at 0.1 x lr): {', '.join(map(str, nc))} of {c['clients']}."]
    if cell_dir is not None:
        cs = [json.loads((Path(str(cell_dir).replace('_s0', f'_s{s}'))/'summary.json').read_text()).get('rela_share') for s in seeds]
        lines += [f"Ours (the leaderboard cells' `rela_share`; every client relabels at its first round from round {int(0.8 * c['rounds']) + 1}): "
                  f"{', '.join(f(100 * x) + '%' if x is not None else '-' for x in cs)}."]
    return common_table(folder, out, method=f'FedReLa on {base}', script='scripts/peers/fedrela.py', setting=setting, cell_dir=cell_dir,
                        pm_note="Their per-round local test (`localtest`) is skipped by the adapter, so theirs has no PM here.", extra_lines=lines)


if __name__ == '__main__':
    p, sub, t = adapter_cli(__doc__)
    t.add_argument('--sse-norm', type=float, default=None, help="diagnostic: rescale their SSE-C solve to this mean column norm (theirs: 0.1; ours: gamma 2)")
    c = sub.add_parser('check', help="Eq. 1-4 of theirs against ours on random clients"); c.add_argument('folder'); c.add_argument('commit')
    a = p.parse_args()
    if a.side == 'check': check_relabel(a.folder, a.commit)
    elif a.side == 'theirs': run_theirs(a.folder, a.commit, a.config, a.out, a.rounds, a.set, a.sse_norm)
    else: write_table(a.folder, a.out, a.cell)
