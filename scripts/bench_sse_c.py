#!/usr/bin/env python
"""Time the reference SSE-C construction and check its acceptance bars.

    python scripts/bench_sse_c.py                      # reference setting, 1 torch thread
    python scripts/bench_sse_c.py --threads 2          # both cores
    python scripts/bench_sse_c.py --table results/sse_c/table6.csv --heatmap results/sse_c/heatmap_reference.png \
        --inits results/sse_c/inits.csv

Reference setting (the official FedLoGe code): sse_c(512, 100, beta=0.6, gamma=0.1, steps=10000, lr=1e-4).
Bars: exactly 60% zeros, mean column norm within 1% of gamma, norm variance < 1e-6, mean pairwise angle
>= 90.4 deg, min pairwise angle >= 85 deg, wall time < 30 s. Exit status 1 when a bar fails.
Timing uses time.perf_counter only. The paper's figure (A.4): 11 min 52 s on an RTX 3090.
"""
import argparse, os, platform, sys, time

import torch

from fedloge_nb.etf import etf_stats, plot_cosine_heatmap
from fedloge_nb.sse_c import sse_c, sse_c_table, sparse_init, INIT_KINDS, PAPER_TABLE6

PAPER_SECONDS = 11 * 60 + 52
REF = dict(d=512, C=100, beta=0.6, gamma=0.1, steps=10_000, lr=1e-4)


def check(st, secs, d, C, beta, gamma, max_seconds):
    "List of (bar, value, ok) for the acceptance bars (exact sparsity, norms, angles, time)."
    n_zero = round(st['sparsity'] * d * C)
    return [
        (f"exactly {beta:.0%} zeros ({round(beta * d * C)})", n_zero, n_zero == round(beta * d * C)),
        (f"|norm_mean - gamma| <= 1% of gamma ({gamma})", st['norm_mean'], abs(st['norm_mean'] - gamma) <= 0.01 * gamma),
        ("norm_var < 1e-6", st['norm_var'], st['norm_var'] < 1e-6),
        ("angle_mean >= 90.4 deg", st['angle_mean'], st['angle_mean'] >= 90.4),
        ("angle_min >= 85 deg", st['angle_min'], st['angle_min'] >= 85.0),
        (f"seconds < {max_seconds:g}", secs, secs < max_seconds),
    ]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--threads', type=int, default=1, help='torch threads (default 1: fastest for a 512x100 matrix here)')
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--max-seconds', type=float, default=30.0)
    p.add_argument('--table', help='also run the Table-6 grid (beta 0.6/0.4 x gamma 0.5/1.0/1.5) and write it as CSV here')
    p.add_argument('--inits', help='also run SSE-C (d=512, C=100, gamma=1, 10k steps) from every Table-9 init, '
                   'with and without rescale, and write the statistics as CSV here')
    p.add_argument('--heatmap', help='write the cosine heatmap (paper Fig. 7) of the reference SSE-C to this PNG')
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    load = ', '.join(f'{x:.2f}' for x in os.getloadavg()) if hasattr(os, 'getloadavg') else 'n/a'
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), {os.cpu_count()} CPU(s), "
          f"{platform.processor() or platform.machine()}, load average before the run: {load}")
    print("setting: sse_c(" + ", ".join(f"{k}={v}" for k, v in REF.items()) + f", seed={a.seed})")

    t0 = time.perf_counter()
    W, _ = sse_c(REF['d'], REF['C'], beta=REF['beta'], gamma=REF['gamma'], steps=REF['steps'], lr=REF['lr'], seed=a.seed)
    secs = time.perf_counter() - t0
    st = etf_stats(W)

    print("\n| beta | gamma | norm_mean | norm_var | angle_mean | angle_var | angle_min | cos_max | sparsity | seconds |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print(f"| {REF['beta']} | {REF['gamma']} | {st['norm_mean']:.5f} | {st['norm_var']:.2e} | {st['angle_mean']:.3f} | "
          f"{st['angle_var']:.4f} | {st['angle_min']:.3f} | {st['cos_max']:.5f} | {st['sparsity']:.4f} | {secs:.1f} |")
    print(f"\nreference code's result (official FedLoGe code): angle_mean 90.578, norm_mean 0.10024")
    print(f"time: {secs:.1f} s on this CPU vs the paper's 11 min 52 s ({PAPER_SECONDS} s) on an RTX 3090 "
          f"({PAPER_SECONDS / secs:.0f}x faster)")

    if a.heatmap:
        import matplotlib; matplotlib.use('Agg')
        import matplotlib.pyplot as plt
        os.makedirs(os.path.dirname(a.heatmap) or '.', exist_ok=True)
        import numpy as np
        fig, axs = plt.subplots(1, 2, figsize=(12, 5))
        plot_cosine_heatmap(W, ax=axs[0], title='SSE-C d=512, C=100, beta=0.6, gamma=0.1 (Fig. 7)')
        plot_cosine_heatmap(W, ax=axs[1], title='same, off-diagonal, colour range +-0.02',
                            vmin=-0.02, vmax=0.02, mask=np.eye(W.shape[1], dtype=bool))
        fig.tight_layout(); fig.savefig(a.heatmap, dpi=110); plt.close(fig)
        print(f"wrote {a.heatmap}")

    if a.table:
        tab = sse_c_table(seed=a.seed)
        paper = {(b, g): (nm, nv, am, av) for b, g, nm, nv, am, av in PAPER_TABLE6}
        for col, i in (('paper_norm_mean', 0), ('paper_norm_var', 1), ('paper_angle_mean', 2), ('paper_angle_var', 3)):
            tab[col] = [paper[(b, g)][i] for b, g in zip(tab.beta, tab.gamma)]
        os.makedirs(os.path.dirname(a.table) or '.', exist_ok=True)
        tab.to_csv(a.table, index=False, float_format='%.6g')
        print(f"\nTable 6 (d=512, C=100, 10,000 steps, lr 1e-4) -> {a.table}")
        print(tab[['beta', 'gamma', 'norm_mean', 'norm_var', 'angle_mean', 'angle_var', 'angle_min',
                   'paper_angle_mean', 'paper_angle_var', 'seconds']].to_string(index=False, float_format=lambda x: f"{x:.4g}"))

    if a.inits:
        import pandas as pd
        rows = []
        for kind in INIT_KINDS:
            W0, _ = sparse_init(512, 100, kind, beta=0.6, seed=a.seed)
            s0 = etf_stats(W0)
            for rescale in (False, True):
                t0 = time.perf_counter()
                Wk, _ = sse_c(512, 100, beta=0.6, gamma=1.0, steps=10_000, lr=1e-4, seed=a.seed, init=kind, rescale=rescale)
                rows.append(dict(init=kind, rescale=rescale, start_norm_mean=s0['norm_mean'], start_angle_mean=s0['angle_mean'],
                                 start_angle_min=s0['angle_min'], **etf_stats(Wk), seconds=time.perf_counter() - t0))
        inits = pd.DataFrame(rows)
        os.makedirs(os.path.dirname(a.inits) or '.', exist_ok=True)
        inits.to_csv(a.inits, index=False, float_format='%.6g')
        print(f"\nSSE-C from the Table-9 inits (d=512, C=100, beta=0.6, gamma=1.0, 10,000 steps, lr 1e-4) -> {a.inits}")
        print(inits[['init', 'rescale', 'start_norm_mean', 'start_angle_min', 'norm_mean', 'norm_var', 'angle_mean',
                     'angle_min']].to_string(index=False, float_format=lambda x: f"{x:.4g}"))

    print("\nbars:")
    ok = True
    for name, val, passed in check(st, secs, REF['d'], REF['C'], REF['beta'], REF['gamma'], a.max_seconds):
        ok &= passed
        print(f"  [{'ok' if passed else 'FAIL'}] {name}: {val:.6g}")
    print("all bars met" if ok else "SOME BARS FAILED")
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
