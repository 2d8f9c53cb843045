"""Markdown tables of every GM / PM inference mode from the run folders of a `compare` (or sweep) output.

    python scripts/nc_tables.py results/nc_methods/fmnist_if100_a02

One row per (method, metric key): mean ± std over the seeds found (every cell folder OUT/<cell>/summary.json,
grouped by its method, whether or not newer method defaults would re-make it). `gm_acc_last50` is Huang et al.'s
(2023) metric: the mean GM over the evaluations in the last 50 rounds (the cell's history.csv), computed per
seed, then mean ± std over seeds.
"""
from __future__ import annotations
import json, sys
from pathlib import Path
import numpy as np
from fedloge_nb.aggregate import fmt_values as fmt, read_history

def main(root):
    runs = {}
    for f in sorted(Path(root).glob('*/summary.json')):
        s = json.loads(f.read_text())
        runs.setdefault(s['method'], []).append((s, read_history(f.parent/'history.csv')))
    print('| method | metric | value | seeds |\n|---|---|---|---|')
    for meth, rs in runs.items():
        ss = [s for s, _ in rs]
        keys = [k for k in ss[0] if k.startswith(('gm_acc', 'pm_acc')) and k[6:7] in ('', '_') and not k.startswith('pm_acc_weighted_')
                and isinstance(ss[0][k], (float, int)) and ss[0][k] is not None]
        for k in keys:
            print(f"| {meth} | {k} | {fmt([s.get(k) for s in ss])} | {len(ss)} |")
        last = []
        for _, h in rs:
            R = max(int(r['round']) for r in h)
            v = [r['gm_acc'] for r in h if r.get('gm_acc') is not None and int(r['round']) > R - 50]
            if v: last.append(float(np.mean(v)))
        if last: print(f"| {meth} | gm_acc_last50 | {fmt(last)} | {len(last)} |")

if __name__ == '__main__':
    main(sys.argv[1] if len(sys.argv) > 1 else 'results/nc_methods/fmnist_if100_a02')
