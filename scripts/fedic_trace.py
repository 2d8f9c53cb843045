"""FedIC's server, traced round by round: why its leaderboard runs diverge at lr 0.05 (chapter 08m).

Runs FedIC from a leaderboard cell's config.json (the traced lr-0.05 cell's, whose folder left the leaderboard when
FedIC moved to lr 0.02, is kept beside its trace) for a few rounds and writes one row a round: the clients' losses, the
distilled global model's cross-entropy and largest |logit| on the server set, the weight norms of the FedAvg average
and of the distilled model, and the teacher's largest per-class scale a. Nothing in the method changes: the trace is a
subclass whose `aggregate` calls FedIC's and reads the result.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/fedic_trace.py \
        results/fedic_trace/if100_s0_lr0.05_config.json 24 results/fedic_trace/if100_s0_lr0.05.csv
"""
import json, sys
from pathlib import Path
import pandas as pd
import torch
import torch.nn.functional as F
from fedloge_nb.federated import FedConfig, FedAvg
from fedloge_nb.fedic import FedIC
from fedloge_nb.engine import run_fl
from fedloge_nb.registry import make_algorithm
from fedloge_nb.datasets import atomic_write


def _norms(state: dict, tag: str) -> dict:
    "Each weight matrix's Frobenius norm, as columns `{tag}_{name}`."
    return {f'{tag}_{k.replace(".weight", "")}': float(v.float().norm()) for k, v in state.items() if k.endswith('weight')}


class TracedFedIC(FedIC):
    "FedIC, unchanged, with a per-round record of what its server did."
    def aggregate(self, gstate, results):
        avg = FedAvg.aggregate(self, gstate, results)
        new = super().aggregate(gstate, results)
        self.server_net.load_state_dict(new, strict=False); self.server_net.eval()
        with torch.no_grad(): z = self.server_net(self.xs)
        losses = [r.loss for r in results]
        self.trace.append(dict(round=self.rounds_done, client_loss_mean=sum(losses) / len(losses), client_loss_max=max(losses),
                               server_ce=float(F.cross_entropy(z, self.ys)), server_max_logit=float(z.abs().max()),
                               teacher_scale_max=float(self.teacher.logit_scale.detach().max()),
                               **_norms(avg, 'avg'), **_norms(new, 'distilled')))
        return new


if __name__ == '__main__':
    if len(sys.argv) != 4: sys.exit(__doc__)
    cfg_path, rounds, out = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    d = json.loads(Path(cfg_path).read_text())
    d = d.get('config', d)
    if d.get('method') != 'fedic': sys.exit(f"{cfg_path} is a {d.get('method')!r} run: give a FedIC cell's config.json")
    cfg = FedConfig(**{**d, 'rounds': rounds, 'eval_every': rounds})
    base = make_algorithm(cfg)
    algo = TracedFedIC(**base.hp); algo.trace = []
    err = ''
    try: run_fl(cfg, progress=False, algo=algo)
    except Exception as e: err = f'{type(e).__name__}: {e}'
    df = pd.DataFrame(algo.trace)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out, f"# {' '.join(['.venv/bin/python', 'scripts/fedic_trace.py'] + sys.argv[1:])}\n"
                      f"# config: {json.dumps(cfg.key())}\n" + (f"# stopped: {err}\n" if err else '') + df.to_csv(index=False, float_format='%.4f'))
    print(df[['round', 'client_loss_max', 'server_ce', 'server_max_logit', 'teacher_scale_max', 'distilled_backbone.fc1']].to_string(index=False))
    if err: print(err)
