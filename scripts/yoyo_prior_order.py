"""FedYoYo's prior in the round it is measured (the authors' order) against one round later (ours): one run each (chapter 09d).

Our FedYoYo measures a client's effective numbers on the received model inside its update, so the server's prior
reaches the clients of the next round and round 1 trains on the uniform prior. The authors' loop first asks the round's
clients for their effective numbers on the received model, folds them into the server's, then trains the same clients
with that prior. `SameRoundYoYo` runs that order in one process: at a round's first client update it measures every
sampled client of the round (their data, which a federated client could not read: a probe, not a method) and trains
each client with the prior of the updated numbers. The server's effective numbers are the same in both orders (the
same measurements on the same models, folded in by the same rule); only the prior a round trains with differs.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/yoyo_prior_order.py \
        results/sweeps/leaderboard_if100/fmnist_if100_a0.5_fedyoyo_kd_weight1_s0/config.json results/yoyo_prior_order/if100_s0.json

`--rounds N` (before the two paths) runs N rounds instead of the cell's. With the cell's rounds the output also holds the
committed cell's numbers and whether the run in our order repeats them (only on the machine and torch that made the cell:
the comparison that counts is between the two runs here, on one machine).
"""
import json, sys
from pathlib import Path
import torch
from fedloge_nb.federated import FedConfig, client_datasets, sample_clients, derive_seed
from fedloge_nb.evaluation import forward_batched
from fedloge_nb.fedyoyo import FedYoYo, effective_numbers, update_eff
from fedloge_nb.registry import matched_hp
from fedloge_nb.engine import run_fl
from fedloge_nb.datasets import atomic_write

KEYS = ('gm_acc', 'gm_many', 'gm_med', 'gm_few', 'pm_acc', 'gm_acc_lastk', 'gm_few_lastk', 'pm_acc_lastk', 'val_gm_acc', 'val_pm_acc')


class SameRoundYoYo(FedYoYo):
    "FedYoYo in the authors' order: the round's clients measure their effective numbers first, then train with the prior they give."
    def build(self, fed, cfg):
        super().build(fed, cfg); self.clients, self.eff = client_datasets(fed, self.device, cfg.drop_last), {}
        self.first_prior = None

    def round_eff(self, gstate, cfg) -> torch.Tensor:
        "The server's effective numbers after this round's measurements on the received model (what `aggregate` will hold)."
        rnd = int(gstate['yoyo.round']) + 1
        if rnd not in self.eff:
            self.local.load_state_dict(gstate, strict=False); self.local.eval(); measured = []
            for k in sample_clients(cfg.clients, cfg.frac, cfg.seed, rnd):
                d = self.clients[k]
                if len(d) == 0: continue
                with torch.no_grad(): h = forward_batched(self.local.backbone, d.x)
                g = torch.Generator().manual_seed(derive_seed(derive_seed(cfg.seed, 'client', rnd, k), 'yoyo_eff'))   # the seed client_update uses
                measured.append(effective_numbers(h, d.y, len(d.counts), cfg.batch_size, g).to(gstate['yoyo.eff']))
            self.eff = {rnd: update_eff(gstate['yoyo.eff'], measured, rnd == 1, float(self.hp['eff_momentum']), float(self.hp['change_threshold']))}
            if rnd == 1: e = self.eff[rnd].float(); self.first_prior = (e / e.sum()).tolist()
        return self.eff[rnd]

    def client_update(self, gstate, cstate, data, cfg, seed):
        return super().client_update({**gstate, 'yoyo.eff': self.round_eff(gstate, cfg)}, cstate, data, cfg, seed)


def run(cfg: FedConfig, same_round: bool) -> tuple[dict, list | None]:
    "(the summary's `KEYS` and the server's final prior, the prior round 1 trained with: None in our order, where it is uniform) of one run of `cfg`."
    cls = SameRoundYoYo if same_round else FedYoYo
    algo = cls(**{**cfg.hp, **matched_hp(cls, cfg)})                   # as make_algorithm builds it
    s = run_fl(cfg, progress=False, algo=algo).summary
    return {k: s[k] for k in (*KEYS, 'yoyo_prior') if k in s}, getattr(algo, 'first_prior', None)


if __name__ == '__main__':
    args = sys.argv[1:]; rounds = None
    if args[:1] == ['--rounds']: rounds, args = int(args[1]), args[2:]
    cfg_path, out = Path(args[0]), Path(args[1])
    cfg = FedConfig(**json.loads(cfg_path.read_text())['config'])
    if cfg.method != 'fedyoyo': raise SystemExit(f'{cfg_path} is a {cfg.method} cell: give a fedyoyo config.json')
    cell_rounds = cfg.rounds
    if rounds: cfg.rounds = rounds
    ours, _ = run(cfg, False)
    same, prior1 = run(cfg, True)
    res = {'config': str(cfg_path), 'rounds': cfg.rounds, 'cell_rounds': cell_rounds, 'next_round': ours, 'same_round': same,
           'same_round_prior_round1': [round(v, 5) for v in prior1]}
    if cfg.rounds == cell_rounds and (p := cfg_path.parent / 'summary.json').exists():   # the committed cell, for comparison
        want = json.loads(p.read_text()); res['cell'] = {k: want[k] for k in KEYS if k in want}
        res['next_round_is_the_cell'] = all(abs(ours[k] - want[k]) <= 1e-6 for k in res['cell'] if k in ours)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out, json.dumps(res, indent=1) + '\n')
    print(json.dumps({k: {m: round(v, 2) for m, v in res[k].items() if m in KEYS} for k in ('next_round', 'same_round')}))
