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
import argparse, json, os, sys, tempfile, time
from pathlib import Path
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cell_config, check_commit, run_ours, save_theirs, shot_means, write_table as common_table, TensorSet, EVAL_ROUNDS
from fedloge_nb.federated import FedConfig, sample_clients
from fedloge_nb.data import make_fed_data
from fedloge_nb.models import make_backbone


# ---------------------------------------------------------------- theirs
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
    head = check_commit(folder, commit); folder = Path(folder).resolve()
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
    save_theirs(out, repository='https://github.com/Yutong-Dai/FedNH', commit=head, cfg=cfg, rows=rows, wall_s=dt, arguments=ns,
                pm_definition="their code's: the mean over the round's active clients of their model after the round's local training, on its local test set")


def write_table(folder, out, cell_dir=None):
    "The comparison as markdown (`common.write_table`) with FedNH's setting."
    c = json.loads(next(Path(folder).glob('ours_*.json')).read_text())['config']
    setting = (f"Setting: the leaderboard's stage 2 at {c['dataset']} IF {c['imb_factor']}, Dirichlet alpha {c['alpha']} (FedNH at the variant stage 1 chose "
               f"for GM, rho {c['hp'].get('rho')}): {c['clients']} clients, frac {c['frac']}, {c['rounds']} rounds x {c['local_epochs']} local epoch, "
               f"batch {c['batch_size']}, lr {c['lr']}, momentum {c['momentum']}, weight decay {c['weight_decay']}, val_frac {c.get('val_frac', 0)}.")
    return common_table(folder, out, method='FedNH', script='scripts/peers/fednh.py', setting=setting, cell_dir=cell_dir)


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
