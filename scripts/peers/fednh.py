"""FedNH by its authors' code (Yutong-Dai/FedNH) beside ours, on the same data, model, client sampling and optimiser.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/peers/fednh.py theirs FOLDER COMMIT CONFIG.json OUT.json [--rounds N]
    OMP_NUM_THREADS=1 .venv/bin/python scripts/peers/fednh.py ours CONFIG.json OUT.json [--rounds N]
    .venv/bin/python scripts/peers/fednh.py table FOLDER OUT.md [--cell CELL_DIR_OF_SEED_0]

FOLDER is a checkout of https://github.com/Yutong-Dai/FedNH at COMMIT (checked with git when FOLDER is a git work
tree; its code is run, never copied into this repository). CONFIG.json is a leaderboard cell's `config.json` (e.g.
`results/sweeps/leaderboard_if100/fmnist_if100_a0.5_fednh_rho0.99_s0/config.json`): its data arguments, seed, rounds,
batch size, lr, momentum, weight decay and FedNH's rho are used by both sides. `ours` runs the package's engine on the
cell's config (evaluated every 10 rounds, as the cell); `theirs` runs the authors' `main.run` unmodified, their
`FedNHClient` / `FedNHServer` (training loop, gradient clipping at norm 10, client prototypes, equal-weight averaging,
prototype smoothing, orthogonal prototype initialisation, learnable scale starting at 1, their evaluation), with only
these replaced at import time:

- data: `main.get_datasets` returns the package's long-tailed training pool and balanced test set
  (`fedloge_nb.data.make_fed_data` for the cell's data arguments, so the same seed gives the same split), and
  `main.setup_clients` builds their clients on the package's client training indices and local test sets (their
  `setup_clients` minus its own partition: the body of their loop, `setup_seed(2022)` then the client constructor, is
  kept), with `split_testset` on so that their personalised accuracy reads the local test sets. Their code downloads
  CIFAR/FMNIST through torchvision and partitions it itself; the comparison needs the package's split.
- model: their client builds `eval(config['model'] + 'NH')`; the name `FedLTCNNNH` is added to their `FedUH` module:
  the package's CNN backbone (`make_backbone`, the leaderboard's `cnn`) under their FedNH head, whose forward is
  `Conv2CifarNH.forward` after the convolutions (unit features, unit prototypes unless frozen, `scaling` times the
  cosine). Their CNN is a CIFAR network for 3x32x32 images.
- client sampling: `Server.select_clients` returns the package's `sample_clients(clients, frac, seed, round)`, so both
  sides train the same clients every round (their own draw uses numpy's global generator).
- the run's settings through their configuration (a YAML written from their `Cifar10_Conv2Cifar.yaml` and the CLI's
  arguments): 20 clients, 1 local epoch, batch 64, lr 0.05 constant (`diminishing` at the cell's decay, 1), momentum and weight
  decay of the cell, 100 rounds, `FedNH_smoothing` = the cell's rho, `test_every` 1 (their first evaluation is round 1,
  then every `test_every`; the rounds 10, 20, ..., 100 that ours evaluates are read off), no wandb, device cpu, their
  output folder a temporary directory; `Server.save`, which pickles the finished server there (a class defined in this
  script does not pickle), keeps it in memory instead, and its evaluations are read from it.

Both write: GM final (balanced test set, their 'uniform' accuracy), the mean of the last 3 evaluations (rounds 80, 90,
100), many/med/few from the package's shot groups, and PM. PM differs in definition: ours is every client's
personalised model (`p_epochs`, the leaderboard's 5 post-training epochs) on its local test set; theirs, as their
code reports it, the mean over the round's active clients of their model after that round's local training.
"""
import argparse, dataclasses, json, os, subprocess, sys, tempfile, time
from pathlib import Path
import numpy as np
import torch
import torch.nn.functional as F

from fedloge_nb.federated import FedConfig, sample_clients
from fedloge_nb.data import make_fed_data
from fedloge_nb.models import make_backbone
from fedloge_nb.datasets import atomic_write

EVAL_ROUNDS = lambda rounds: list(range(10, rounds + 1, 10)) or [rounds]   # every 10 rounds, as the cells; a shorter test run: its last
COMMAND = lambda: 'OMP_NUM_THREADS=1 .venv/bin/python ' + ' '.join(sys.argv)


def ENV() -> dict:
    "Where a run ran: the CPU's name, torch, threads."
    cpu = next((l.split(':', 1)[1].strip() for l in Path('/proc/cpuinfo').read_text().splitlines() if l.startswith('model name')), None) if Path('/proc/cpuinfo').exists() else None
    return dict(cpu=cpu, torch=torch.__version__, threads=torch.get_num_threads())


def cell_config(path, rounds=None) -> FedConfig:
    c = json.loads(Path(path).read_text())['config']
    cfg = FedConfig(**c)
    return dataclasses.replace(cfg, rounds=int(rounds)) if rounds else cfg


def shot_means(per_class_acc: np.ndarray, shots: dict) -> dict:
    "many/med/few of a balanced test set: the mean per-class accuracy of each group, in %."
    return {f'gm_{g}': 100 * float(per_class_acc[np.asarray(ix)].mean()) for g, ix in shots.items() if len(ix)}


def summarise(rows: list) -> dict:
    "GM final and the last-3 means from the per-evaluation rows."
    last = rows[-3:]
    out = {k: rows[-1][k] for k in rows[-1] if k != 'round'}
    out.update({f'{k}_last3': float(np.mean([r[k] for r in last])) for k in rows[-1] if k != 'round'})
    return out


# ---------------------------------------------------------------- ours
def run_ours(config, out, rounds=None):
    from fedloge_nb.engine import run_fl
    cfg = dataclasses.replace(cell_config(config, rounds), eval_every=10)
    fed = make_fed_data(**cfg.data_args())
    t0 = time.time(); r = run_fl(cfg, fed, progress=False); dt = time.time() - t0
    rows = [dict(round=int(h['round']), gm_acc=h['gm_acc'], gm_many=h['gm_many'], gm_med=h['gm_med'], gm_few=h['gm_few'], pm_acc=h['pm_acc'])
            for h in r.history if h.get('gm_acc') is not None]
    res = dict(side='ours', command=COMMAND(), environment=ENV(), config=cfg.key(), hp=dict(r.algo.hp), rounds=cfg.rounds, rows=rows, summary=summarise(rows),
               final_summary={k: r.summary.get(k) for k in ('gm_acc', 'gm_many', 'gm_med', 'gm_few', 'pm_acc', 'gm_acc_lastk', 'pm_acc_lastk')},
               wall_s=round(dt, 1), pm_definition="every client's personalised model (p_epochs) on its local test set, after training")
    atomic_write(out, json.dumps(res, indent=1, default=str)); print(json.dumps(res['summary'], indent=1))


# ---------------------------------------------------------------- theirs
class TensorSet(torch.utils.data.Dataset):
    "A dataset over tensors with the `.targets` their code reads (`Counter(trainset.targets.numpy())`, `DatasetSplit`)."
    def __init__(self, x, y): self.x, self.targets = x, y
    def __len__(self): return len(self.targets)
    def __getitem__(self, i): return self.x[i], self.targets[i]


def patch_theirs(folder: str, cfg: FedConfig, fed):
    "Import their code from `folder` and replace the data, the model name, the client sampling (nothing of FedNH itself)."
    sys.path.insert(0, str(folder))
    import main as M                                            # their main.py (top-level imports only)
    from src.utils import DatasetSplit, setup_seed
    from src.flbase import server as S
    from src.flbase.model import Model
    from src.flbase.strategies import FedUH as UH

    class FedLTCNNNH(Model):
        "The package's CNN backbone under their FedNH head (the lines of their Conv2CifarNH after its convolutions)."
        def __init__(self, config):
            super().__init__(config)
            self.return_embedding = config['FedNH_return_embedding']
            self.base = make_backbone(cfg.model, fed.in_channels, fed.img_size)
            temp = torch.nn.Linear(self.base.feature_dim, config['num_classes'], bias=False).state_dict()['weight']
            self.prototype = torch.nn.Parameter(temp)
            self.scaling = torch.nn.Parameter(torch.tensor([1.0]))

        def forward(self, x):
            feature_embedding = self.base(x)
            feature_embedding_norm = torch.norm(feature_embedding, p=2, dim=1, keepdim=True).clamp(min=1e-12)
            feature_embedding = torch.div(feature_embedding, feature_embedding_norm)
            if self.prototype.requires_grad == False:
                normalized_prototype = self.prototype
            else:
                prototype_norm = torch.norm(self.prototype, p=2, dim=1, keepdim=True).clamp(min=1e-12)
                normalized_prototype = torch.div(self.prototype, prototype_norm)
            logits = torch.matmul(feature_embedding, normalized_prototype.T)
            logits = self.scaling * logits
            if self.return_embedding:
                return feature_embedding, logits
            else:
                return logits
    UH.FedLTCNNNH = FedLTCNNNH

    pool = TensorSet(fed.x_train, fed.y_train)
    test = TensorSet(fed.x_test, fed.y_test)
    used = torch.cat([torch.as_tensor(i) for i in fed.train_idx]).sort().values
    M.get_datasets = lambda name, **kw: (DatasetSplit(pool, used.tolist()), test, None)

    def setup_clients(Client, trainset, testset, criterion, client_config_lst, device, **kwargs):
        "Their setup_clients with the package's split in place of their sampler: the loop body is theirs."
        all_clients_dict = {}
        for cid in range(kwargs['server_config']['num_clients']):
            setup_seed(2022)
            all_clients_dict[cid] = Client(criterion, DatasetSplit(pool, fed.train_idx[cid].tolist()),
                                           DatasetSplit(test, fed.test_idx[cid].tolist()), client_config_lst[cid], cid, device, **kwargs)
        return all_clients_dict
    M.setup_clients = setup_clients

    calls = {'round': 0}
    def select_clients(self, ratio):
        calls['round'] += 1                                     # their run loop calls it once a round, from round 1
        return np.array(sample_clients(cfg.clients, cfg.frac, cfg.seed, calls['round']))
    S.Server.select_clients = select_clients

    def save(self, filename, keep_clients_model=False):
        "Their `Server.save` pickles the server to a file; kept in memory here (a model class of this script does not pickle)."
        KEPT['server'] = self
    S.Server.save = save
    return M


KEPT = {}


def their_yaml(folder, cfg: FedConfig, num_classes: int, path):
    "Their Cifar10_Conv2Cifar.yaml with the run's settings (the lr decays as ours: their 'diminishing' is lr * decay^(round - 1))."
    import yaml
    c = yaml.load(Path(folder, 'experiments', 'Cifar10_Conv2Cifar.yaml').read_text(), Loader=yaml.Loader)
    c['server_config'].update(dataset='FedLT', num_classes=int(num_classes), test_every=1, split_testset=True, use_tqdm=False)
    c['client_config'].update(model='FedLTCNN', num_classes=int(num_classes), num_epochs=int(cfg.local_epochs),
                              batch_size=int(cfg.batch_size), lr_decay_per_round=float(cfg.lr_decay))
    Path(path).write_text(yaml.dump(c))


def run_theirs(folder, commit, config, out, rounds=None):
    folder = Path(folder).resolve()
    try: head = subprocess.run(['git', '-C', str(folder), 'rev-parse', 'HEAD'], capture_output=True, text=True, check=True).stdout.strip()
    except (subprocess.CalledProcessError, FileNotFoundError): head = None
    if head is not None and not head.startswith(commit): sys.exit(f"{folder} is at {head}, not {commit}")
    cfg = cell_config(config, rounds)
    if cfg.lr_schedule != 'exp': sys.exit(f"the cell's lr schedule {cfg.lr_schedule!r}: only 'exp' has their counterpart ('diminishing')")
    fed = make_fed_data(**cfg.data_args())
    if any(len(i) == 0 for i in fed.test_idx): sys.exit("a client without a local test set: their testing needs one")
    M = patch_theirs(folder, cfg, fed)
    work = Path(tempfile.mkdtemp(prefix='fednh_theirs_'))
    their_yaml(folder, cfg, fed.num_classes, work/'config.yaml')
    ns = dict(purpose='peer', device='cpu', global_seed=int(cfg.seed), use_wandb=False, keep_clients_model=False, no_norm=False,
              optimizer='SGD', num_epochs=int(cfg.local_epochs), client_lr=float(cfg.lr), client_lr_scheduler='diminishing',
              sgd_momentum=float(cfg.momentum), sgd_weight_decay=float(cfg.weight_decay), use_sam=False,
              yamlfile=str(work/'config.yaml'), strategy='FedNH', num_clients=int(cfg.clients), num_rounds=int(cfg.rounds),
              participate_ratio=float(cfg.frac), partition='noniid-label-distribution', beta=str(cfg.alpha),
              num_classes_per_client=None, num_shards_per_client=None,
              FedNH_smoothing=float(cfg.hp.get('rho', 0.9)), FedNH_server_adv_prototype_agg=False, FedNH_client_adv_prototype_agg=False)
    cwd = os.getcwd(); os.chdir(work)
    try:
        t0 = time.time(); M.run(argparse.Namespace(**ns)); dt = time.time() - t0
    finally: os.chdir(cwd)
    server = KEPT['server']
    shots = {g: fed.shots[g].tolist() for g in ('many', 'med', 'few')}
    rows = []
    for r in EVAL_ROUNDS(cfg.rounds):
        g = server.gfl_test_acc_dict[r]
        per_class = (g['correct_per_class'].double() / torch.bincount(fed.y_test, minlength=len(g['correct_per_class'])).double()).numpy()
        rows.append(dict(round=r, gm_acc=100 * float(g['acc_by_criteria']['uniform']), **shot_means(per_class, shots),
                         pm_acc=100 * float(server.average_pfl_test_acc_dict[r]['uniform'])))
    res = dict(side='theirs', command=COMMAND(), environment=ENV(), repository='https://github.com/Yutong-Dai/FedNH', commit=head or commit, config=cfg.key(), arguments=ns,
               rounds=cfg.rounds, rows=rows, summary=summarise(rows), wall_s=round(dt, 1),
               pm_definition="their code's: the mean over the round's active clients of their model after the round's local training, on its local test set")
    atomic_write(out, json.dumps(res, indent=1, default=str)); print(json.dumps(res['summary'], indent=1))


def write_table(folder, out, cell_dir=None):
    "The comparison as markdown from every ours_*.json / theirs_*.json pair in `folder` (paired by seed): per seed, and the mean difference with its range."
    runs = {}
    for p in sorted(Path(folder).glob('*.json')):
        r = json.loads(p.read_text()); runs.setdefault(r['config']['seed'], {})[r['side']] = r
    seeds = sorted(k for k, v in runs.items() if {'ours', 'theirs'} <= set(v))
    if not seeds: sys.exit(f'no pair of ours/theirs runs in {folder}')
    for k in seeds:
        a, b = runs[k]['ours']['config'], runs[k]['theirs']['config']
        if a != b: sys.exit(f'seed {k}: the two runs have different configs')
    f = lambda x: '-' if x is None else f'{x:.2f}'
    t0 = runs[seeds[0]]['theirs']; c = runs[seeds[0]]['ours']['config']
    keys = [('gm_acc', 'GM final (round %d)' % c['rounds']), ('gm_acc_last3', 'GM, mean of the last 3 evaluations'), ('gm_many_last3', 'many (last 3)'),
            ('gm_med_last3', 'med (last 3)'), ('gm_few_last3', 'few (last 3)')]
    lines = ["# FedNH: the authors' code beside ours", '',
             f"Setting: the leaderboard's stage 2 at {c['dataset']} IF {c['imb_factor']}, Dirichlet alpha {c['alpha']} (FedNH at the variant stage 1 chose "
             f"for GM, rho {c['hp'].get('rho')}): {c['clients']} clients, frac {c['frac']}, {c['rounds']} rounds x {c['local_epochs']} local epoch, "
             f"batch {c['batch_size']}, lr {c['lr']}, momentum {c['momentum']}, weight decay {c['weight_decay']}, val_frac {c.get('val_frac', 0)}; "
             f"seeds {', '.join(map(str, seeds))}. Both sides get the same split, model (the package's CNN), client sampling and optimiser settings "
             f"(`scripts/peers/fednh.py`, whose docstring says what was replaced in theirs and why). Evaluations every 10 rounds.", '',
             f"Mean over the {len(seeds)} seed(s); theirs minus ours paired by seed: mean, its 95% t-interval and the range over the seeds.", '',
             '| metric | ours | theirs | theirs minus ours [95% CI] | range |', '|---|---|---|---|---|']
    from scipy import stats
    for k, name in keys:
        a = np.array([runs[s]['ours']['summary'][k] for s in seeds]); b = np.array([runs[s]['theirs']['summary'][k] for s in seeds]); dd = b - a
        h = stats.t.ppf(0.975, len(dd) - 1) * dd.std(ddof=1) / np.sqrt(len(dd)) if len(dd) > 1 else float('nan')
        lines.append(f"| {name} | {f(a.mean())} | {f(b.mean())} | {dd.mean():+.2f} [{dd.mean() - h:+.2f}, {dd.mean() + h:+.2f}] | {dd.min():+.2f} to {dd.max():+.2f} |")
    po = np.array([runs[s]['ours']['final_summary']['pm_acc'] for s in seeds]); pt = np.array([runs[s]['theirs']['summary']['pm_acc_last3'] for s in seeds])
    lines.append(f"| PM, each code's own (not comparable, below) | {f(po.mean())} (final) | {f(pt.mean())} (last 3) | - | - |")
    lines += ['', '| seed | GM final ours | GM final theirs | GM last 3 ours | GM last 3 theirs | few (last 3) ours | few (last 3) theirs | wall s ours / theirs |',
              '|---|---|---|---|---|---|---|---|']
    for s in seeds:
        o, t = runs[s]['ours'], runs[s]['theirs']
        lines.append(f"| {s} | {f(o['summary']['gm_acc'])} | {f(t['summary']['gm_acc'])} | {f(o['summary']['gm_acc_last3'])} | {f(t['summary']['gm_acc_last3'])} | "
                     f"{f(o['summary']['gm_few_last3'])} | {f(t['summary']['gm_few_last3'])} | {o['wall_s']:.0f} / {t['wall_s']:.0f} |")
    if cell_dir is not None:
        cs = [json.loads((Path(str(cell_dir).replace('_s0', f'_s{s}'))/'summary.json').read_text()) for s in seeds]
        lines += ['', f"The leaderboard's own cells of these seeds (`{cell_dir}` and its seeds; made on {', '.join(sorted({x['environment']['cpu'] for x in cs}))}, "
                  f"torch {', '.join(sorted({x['environment']['torch'] for x in cs}))}; ours here ran on "
                  f"{', '.join(sorted({runs[s]['ours'].get('environment', {}).get('cpu', '?') for s in seeds}))}): GM final "
                  f"{', '.join(f(x['gm_acc']) for x in cs)}, last 3 {', '.join(f(x['gm_acc_lastk']) for x in cs)}, against ours here "
                  f"{', '.join(f(runs[s]['ours']['summary']['gm_acc']) for s in seeds)} and {', '.join(f(runs[s]['ours']['summary']['gm_acc_last3']) for s in seeds)}: "
                  f"the same code and seed, other machines' float arithmetic."]
    lines += ['', f"PM, ours: {runs[seeds[0]]['ours']['pm_definition']}. PM, theirs: {t0['pm_definition']}. "
              "The two measure different models, so no difference is given.", '',
              f"Authors' code: {t0['repository']} at commit `{t0['commit']}` (checked out outside this repository, never copied into it).", '',
              'Commands (repository root), each JSON records its own:', '']
    lines += [f"- `{runs[s][side]['command']}`" for s in seeds for side in ('ours', 'theirs')]
    lines += [f"- this table: `.venv/bin/python {' '.join(sys.argv)}`"]
    atomic_write(out, '\n'.join(lines) + '\n'); print('\n'.join(lines))


if __name__ == '__main__':
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    sub = p.add_subparsers(dest='side', required=True)
    t = sub.add_parser('theirs'); t.add_argument('folder'); t.add_argument('commit'); t.add_argument('config'); t.add_argument('out')
    t.add_argument('--rounds', type=int, default=None)
    o = sub.add_parser('ours'); o.add_argument('config'); o.add_argument('out'); o.add_argument('--rounds', type=int, default=None)
    w = sub.add_parser('table'); w.add_argument('folder'); w.add_argument('out'); w.add_argument('--cell', default=None)
    a = p.parse_args()
    if a.side == 'theirs': run_theirs(a.folder, a.commit, a.config, a.out, a.rounds)
    elif a.side == 'ours': run_ours(a.config, a.out, a.rounds)
    else: write_table(a.folder, a.out, a.cell)
