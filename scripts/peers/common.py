"""What every adapter in `scripts/peers/` shares: a leaderboard cell's config, our side's run, the per-evaluation rows,
the commit check and the ours-vs-theirs table.

An adapter runs a method's authors' code (a checkout outside this repository, its path and commit on the command line)
on the package's split, model and client sampling, and our engine on the same cell config; both write a JSON with
per-evaluation rows `{round, gm_acc, gm_many, gm_med, gm_few, pm_acc}` and a `summary` (final and last-3 means).
`write_table` pairs the two sides by seed and writes the README of `results/peers/<method>/`.
"""
import dataclasses, json, subprocess, sys, time
from pathlib import Path
import numpy as np
import torch

from fedloge_nb.federated import FedConfig
from fedloge_nb.data import make_fed_data
from fedloge_nb.datasets import atomic_write
from fedloge_nb.peers import load_pairs, compare, summarise_rows as summarise, verdict, WIDE

EVAL_ROUNDS = lambda rounds: list(range(10, rounds + 1, 10)) or [rounds]   # every 10 rounds, as the cells; a shorter test run: its last
COMMAND = lambda: 'OMP_NUM_THREADS=1 .venv/bin/python ' + ' '.join(sys.argv)


def ENV() -> dict:
    "Where a run ran: the CPU's name, torch, threads."
    cpu = next((l.split(':', 1)[1].strip() for l in Path('/proc/cpuinfo').read_text().splitlines() if l.startswith('model name')), None) if Path('/proc/cpuinfo').exists() else None
    return dict(cpu=cpu, torch=torch.__version__, threads=torch.get_num_threads())


def cell_config(path, rounds=None, **changes) -> FedConfig:
    "The FedConfig of a cell's `config.json`, with `rounds` (a short test run) and any field `changes`."
    c = json.loads(Path(path).read_text())['config']
    cfg = FedConfig(**c)
    if rounds: changes['rounds'] = int(rounds)
    return dataclasses.replace(cfg, **changes) if changes else cfg


def check_commit(folder, commit) -> str:
    "The checkout's HEAD, which must start with `commit` when `folder` is a git work tree (else `commit` as given)."
    folder = Path(folder).resolve()
    if not folder.is_dir(): sys.exit(f"{folder}: no such folder; clone the authors' repository there and check out {commit}")
    try: head = subprocess.run(['git', '-C', str(folder), 'rev-parse', 'HEAD'], capture_output=True, text=True, check=True).stdout.strip()
    except (subprocess.CalledProcessError, FileNotFoundError): return commit
    if not head.startswith(commit): sys.exit(f"{folder} is at {head}, not {commit}: `git -C {folder} checkout {commit}`")
    return head


def shot_means(per_class_acc: np.ndarray, shots: dict) -> dict:
    "many/med/few of a balanced test set: the mean per-class accuracy of each group, in %."
    return {f'gm_{g}': 100 * float(per_class_acc[np.asarray(ix)].mean()) for g, ix in shots.items() if len(ix)}


def gm_row(round_, model_or_logits, fed, device='cpu', pm_acc=None) -> dict:
    "One evaluation row of a global model (or its test-set logits) on the balanced test set: GM and many/med/few, in %."
    if callable(model_or_logits):
        m = model_or_logits; was = m.training; m.eval()
        with torch.no_grad():
            z = torch.cat([m(fed.x_test[i:i + 1000].to(device)).float().cpu() for i in range(0, len(fed.y_test), 1000)])
        m.train(was)
    else: z = model_or_logits
    pred = z.argmax(1); y = fed.y_test
    per_class = np.array([(pred[y == c] == c).float().mean().item() for c in range(fed.num_classes)])
    shots = {g: fed.shots[g].tolist() for g in ('many', 'med', 'few')}
    return dict(round=int(round_), gm_acc=100 * float((pred == y).float().mean()), **shot_means(per_class, shots), pm_acc=pm_acc)


def run_ours(config, out, rounds=None, **changes):
    "Our engine on the cell's config (evaluated every 10 rounds, as the cells); the JSON `write_table` reads."
    from fedloge_nb.engine import run_fl
    cfg = cell_config(config, rounds, eval_every=10, **changes)
    fed = make_fed_data(**cfg.data_args())
    t0 = time.time(); r = run_fl(cfg, fed, progress=False); dt = time.time() - t0
    rows = [dict(round=int(h['round']), gm_acc=h['gm_acc'], gm_many=h['gm_many'], gm_med=h['gm_med'], gm_few=h['gm_few'], pm_acc=h.get('pm_acc'))
            for h in r.history if h.get('gm_acc') is not None]
    res = dict(side='ours', command=COMMAND(), environment=ENV(), config=cfg.key(), hp=dict(r.algo.hp), rounds=cfg.rounds, rows=rows, summary=summarise(rows),
               final_summary={k: r.summary.get(k) for k in ('gm_acc', 'gm_many', 'gm_med', 'gm_few', 'pm_acc', 'gm_acc_lastk', 'pm_acc_lastk')},
               wall_s=round(dt, 1), pm_definition="every client's personalised model (p_epochs) on its local test set, after training")
    atomic_write(out, json.dumps(res, indent=1, default=str)); print(json.dumps(res['summary'], indent=1))
    return res


def save_theirs(out, *, repository, commit, cfg, rows, wall_s, arguments=None, pm_definition=None, **extra):
    "Write their side's JSON (same layout as ours)."
    res = dict(side='theirs', command=COMMAND(), environment=ENV(), repository=repository, commit=commit, config=cfg.key(), arguments=arguments,
               rounds=cfg.rounds, rows=rows, summary=summarise(rows), wall_s=round(wall_s, 1), pm_definition=pm_definition, **extra)
    atomic_write(out, json.dumps(res, indent=1, default=str)); print(json.dumps(res['summary'], indent=1))
    return res


class TensorSet(torch.utils.data.Dataset):
    "A dataset over tensors with the `.targets` authors' code often reads."
    def __init__(self, x, y): self.x, self.targets = x, y
    def __len__(self): return len(self.targets)
    def __getitem__(self, i): return self.x[i], self.targets[i]


def write_table(folder, out, *, method, script, setting, pm_note=None, cell_dir=None, pm_comparable=False, extra_lines=()):
    "The comparison as markdown from every ours_*.json / theirs_*.json pair in `folder` (paired by seed): means, paired differences with 95% t-intervals, per seed."
    runs = load_pairs(folder); seeds = list(runs)
    if not seeds: sys.exit(f'no pair of ours/theirs runs in {folder}')
    f = lambda x: '-' if x is None else f'{x:.2f}'
    t0 = runs[seeds[0]]['theirs']; c = runs[seeds[0]]['ours']['config']
    keys = [('gm_acc', 'GM final (round %d)' % c['rounds']), ('gm_acc_last3', 'GM, mean of the last 3 evaluations'), ('gm_many_last3', 'many (last 3)'),
            ('gm_med_last3', 'med (last 3)'), ('gm_few_last3', 'few (last 3)')]
    if pm_comparable: keys += [('pm_acc_last3', 'PM, mean of the last 3 evaluations')]
    lines = [f"# {method}: the authors' code beside ours", '', setting, '',
             f"Both sides get the same split, model (the package's CNN), client sampling and optimiser settings (`{script}`, whose docstring says "
             f"what was replaced in theirs and why). Evaluations every 10 rounds.", '',
             f"Mean over the {len(seeds)} seed(s); theirs minus ours paired by seed: mean, its 95% t-interval and the range over the seeds.", '',
             '| metric | ours | theirs | theirs minus ours [95% CI] | range |', '|---|---|---|---|---|']
    ci = {}
    for k, name in keys:
        c = compare(folder, k); ci[k] = c
        lines.append(f"| {name} | {f(c['ours'])} | {f(c['theirs'])} | {c['mean']:+.2f} [{c['lo']:+.2f}, {c['hi']:+.2f}] | {c['min']:+.2f} to {c['max']:+.2f} |")
    if not pm_comparable:
        po = [runs[s]['ours']['final_summary'].get('pm_acc') for s in seeds]; pt = [runs[s]['theirs']['summary'].get('pm_acc_last3') for s in seeds]
        po = None if None in po else float(np.mean(po)); pt = None if None in pt else float(np.mean(pt))
        lines.append(f"| PM, each code's own (not comparable, below) | {f(po)} (final) | {f(pt)} (last 3) | - | - |")
    v = ci['gm_acc_last3']['verdict']
    lines += ['', f"Verdict on GM, mean of the last 3 evaluations: **{v}** (chapter 15f: 'differs' when the 95% interval of theirs minus ours "
              f"excludes 0 or every seed differs by more than {WIDE:g} points in one direction; 'agrees' when it holds 0 and its half-width is "
              f"at most {WIDE:g} points)."]
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
                  f"{', '.join(f(runs[s]['ours']['summary']['gm_acc']) for s in seeds)} and {', '.join(f(runs[s]['ours']['summary']['gm_acc_last3']) for s in seeds)}."]
    if not pm_comparable:
        lines += ['', f"PM, ours: {runs[seeds[0]]['ours']['pm_definition']}. PM, theirs: {t0['pm_definition']}. "
                  "The two measure different models, so no difference is given." if t0.get('pm_definition') else
                  f"PM, ours: {runs[seeds[0]]['ours']['pm_definition']}. Their code reports no personalised accuracy."]
    if pm_note: lines += ['', pm_note]
    lines += list(extra_lines)
    lines += ['', f"Authors' code: {t0['repository']} at commit `{t0['commit']}` (checked out outside this repository, never copied into it).", '',
              'Commands (repository root), each JSON records its own:', '']
    lines += [f"- `{runs[s][side]['command']}`" for s in seeds for side in ('ours', 'theirs')]
    lines += [f"- this table: `.venv/bin/python {' '.join(sys.argv)}`"]
    atomic_write(out, '\n'.join(lines) + '\n'); print('\n'.join(lines))
    return dict(seeds=seeds, ci=ci, verdict=v)


def parse_set(items) -> dict:
    "`key=value` pairs (JSON values, else strings) as FedConfig changes; `hp.NAME=value` goes into hp."
    changes, hp = {}, {}
    for it in items or ():
        if '=' not in it: sys.exit(f"--set {it!r}: write key=value, e.g. --set lr=0.02 or --set hp.alpha=0.01")
        k, v = it.split('=', 1)
        try: v = json.loads(v)
        except json.JSONDecodeError: pass
        if k.startswith('hp.'): hp[k[3:]] = v
        elif k in {f.name for f in dataclasses.fields(FedConfig)}: changes[k] = v
        else: sys.exit(f"--set {k}: not a FedConfig field (see fedloge_nb.federated.FedConfig) nor hp.NAME")
    return dict(changes, hp=hp) if hp else changes


def changes_for(config, sets=()) -> dict:
    "The FedConfig changes of `--set` items for a cell (hp entries merged into the cell's hp)."
    ch = parse_set(sets)
    if 'hp' in ch: ch['hp'] = {**json.loads(Path(config).read_text())['config'].get('hp', {}), **ch['hp']}
    return ch


def with_changes(config, rounds=None, sets=()) -> FedConfig:
    "The cell's config with `--set` changes (hp entries merged into the cell's hp)."
    return cell_config(config, rounds, **changes_for(config, sets))


def adapter_cli(doc: str):
    "The command line every adapter shares: `theirs FOLDER COMMIT CONFIG OUT [--rounds N] [--set k=v]` and `table FOLDER OUT [--cell DIR]`; (parser, subparsers, theirs' parser)."
    import argparse
    p = argparse.ArgumentParser(description=doc.split('\n')[0])
    sub = p.add_subparsers(dest='side', required=True)
    t = sub.add_parser('theirs'); t.add_argument('folder'); t.add_argument('commit'); t.add_argument('config'); t.add_argument('out')
    t.add_argument('--rounds', type=int, default=None); t.add_argument('--set', action='append', default=[])
    w = sub.add_parser('table'); w.add_argument('folder'); w.add_argument('out'); w.add_argument('--cell', default=None)
    return p, sub, t


if __name__ == '__main__':
    import argparse
    p = argparse.ArgumentParser(description="Our side of any adapter: the package's engine on a cell's config, with changes.")
    sub = p.add_subparsers(dest='cmd', required=True)
    o = sub.add_parser('ours', help='run our engine on CONFIG (a cell config.json) and write OUT.json')
    o.add_argument('config'); o.add_argument('out'); o.add_argument('--rounds', type=int, default=None)
    o.add_argument('--set', action='append', default=[], help='key=value FedConfig change, e.g. method=feddyn, lr=0.02, hp.alpha=0.01')
    a = p.parse_args()
    run_ours(a.config, a.out, a.rounds, **changes_for(a.config, a.set))
