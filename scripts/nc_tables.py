"""Markdown tables of every GM / PM inference mode from the run folders of a `compare` output.

    python scripts/nc_tables.py results/nc_methods/fmnist_if100_a02

One row per (method, metric key): mean ± std over the seeds found (folders METHOD_seedN/summary.json).
`gm_acc_last50` is Huang et al.'s (2023) metric: the mean GM over the evaluations in the last 50 rounds (history.csv),
computed per seed, then mean ± std over seeds.
"""
from __future__ import annotations
import csv, json, re, sys
from pathlib import Path
import numpy as np
from fedloge_nb.cli import fmt_values as fmt

def main(root):
    runs = {}
    for f in sorted(Path(root).glob('*_seed*/summary.json')):
        m = re.match(r'(.+)_seed(\d+)$', f.parent.name)
        runs.setdefault(m.group(1), []).append(json.loads(f.read_text()))
    print('| method | metric | value | seeds |\n|---|---|---|---|')
    for meth, ss in runs.items():
        keys = [k for k in ss[0] if re.match(r'(gm_acc|pm_acc)(_|$)', k) and not k.startswith('pm_acc_weighted_')
                and isinstance(ss[0][k], (float, int)) and ss[0][k] is not None]
        for k in keys:
            print(f"| {meth} | {k} | {fmt([s.get(k) for s in ss])} | {len(ss)} |")
        last = []
        for f in sorted(Path(root).glob(f'{meth}_seed*/history.csv')):
            if not (f.parent/'summary.json').exists(): continue          # unfinished run
            rows = list(csv.DictReader(open(f)))
            R = max(int(float(r['round'])) for r in rows)
            v = [float(r['gm_acc']) for r in rows if r.get('gm_acc') not in (None, '') and int(float(r['round'])) > R - 50]
            if v: last.append(float(np.mean(v)))
        if last: print(f"| {meth} | gm_acc_last50 | {fmt(last)} | {len(last)} |")

if __name__ == '__main__':
    main(sys.argv[1] if len(sys.argv) > 1 else 'results/nc_methods/fmnist_if100_a02')
