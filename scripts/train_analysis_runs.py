#!/usr/bin/env python
"""Train (or reload from runs/analysis/) the two FedLoGe backbones of the analysis chapters (SSE-C and dense ETF,
same data, same seed) and write every figure and number of nbs/10-14 to results/analysis/.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/train_analysis_runs.py --rounds 100 --frac 0.5 --local_epochs 1 \
        --batch_size 64 --lr 0.05 --seed 0 --cache runs/analysis --out results/analysis

A finished run in the cache is rebuilt from its checkpoint (no training), so re-running only redoes the analysis.
"""
from __future__ import annotations
import argparse, json, platform, subprocess, sys, time
from pathlib import Path
import numpy as np
import torch
import matplotlib
matplotlib.use('Agg')
import matplotlib.pyplot as plt
import pandas as pd

from fedloge_nb.analysis import analysis_configs, trained_run, features, class_mean_features, degeneration_summary, plot_degeneration, sorted_profiles
from fedloge_nb.pruning import pruning_curve, plot_pruning
from fedloge_nb.tsne import class_mean_angles, tsne_embed, plot_tsne
from fedloge_nb.norms import norm_count_correlation, client_norm_correlations, client_mode_accuracy, pm_table, plot_norms
from fedloge_nb.realign_analysis import gm_groups, finetune_curve, plot_gm_groups, plot_client_pm, plot_finetune_curve
from fedloge_nb.realign import ga_fr
from fedloge_nb.etf import etf_stats

NAMES = {'etf': 'dense ETF', 'sse_c': 'SSE-C'}


def r4(x):
    "Round floats (recursively) for the JSON file."
    if isinstance(x, dict): return {k: r4(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)): return [r4(v) for v in x]
    if isinstance(x, (float, np.floating)): return None if np.isnan(x) else round(float(x), 4)
    if isinstance(x, np.integer): return int(x)
    return x


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--rounds', type=int, default=100); p.add_argument('--frac', type=float, default=0.5)
    p.add_argument('--local_epochs', type=int, default=1); p.add_argument('--batch_size', type=int, default=64)
    p.add_argument('--lr', type=float, default=0.05); p.add_argument('--seed', type=int, default=0)
    p.add_argument('--dataset', default='fmnist'); p.add_argument('--imb_factor', type=float, default=100)
    p.add_argument('--alpha', type=float, default=0.5); p.add_argument('--clients', type=int, default=20)
    p.add_argument('--model', default='cnn')
    p.add_argument('--cache', default='runs/analysis', help='folder of the cached runs (git-ignored)')
    p.add_argument('--out', default='results/analysis', help='folder of the committed figures and numbers')
    p.add_argument('--deg_class', type=int, default=0, help='class of the single-class degeneration panels')
    p.add_argument('--tsne_per_class', type=int, default=200, help='test features per class embedded with the class means')
    p.add_argument('--ft_epochs', type=int, default=15, help='last point of the finetuning curve (Fig. 5)')
    p.add_argument('--ft_lr_small', type=float, default=0.005, help='a second, smaller finetuning lr for the Fig. 5 curve (the engine uses --lr)')
    p.add_argument('--progress', action='store_true')
    a = p.parse_args(argv)
    t_start = time.time()
    out = Path(a.out); out.mkdir(parents=True, exist_ok=True)
    cfgs = analysis_configs(rounds=a.rounds, frac=a.frac, local_epochs=a.local_epochs, batch_size=a.batch_size, lr=a.lr,
                            seed=a.seed, dataset=a.dataset, imb_factor=a.imb_factor, alpha=a.alpha, clients=a.clients, model=a.model)
    cfgs = {'etf': cfgs['etf'], 'sse_c': cfgs['sse_c']}
    runs = {c: trained_run(cfg, a.cache, progress=a.progress, verbose=True) for c, cfg in cfgs.items()}
    try: commit = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True).stdout.strip()
    except Exception: commit = None
    N = {'command': 'OMP_NUM_THREADS=1 .venv/bin/python scripts/train_analysis_runs.py ' + ' '.join(sys.argv[1:] if argv is None else argv),
         'git_commit': commit, 'torch': torch.__version__, 'python': platform.python_version(),
         'configs': {c: cfg.key() for c, cfg in cfgs.items()},
         'summary': {c: {k: v for k, v in r.summary.items() if isinstance(v, (int, float)) and not isinstance(v, bool)} for c, r in runs.items()},
         'data': {'class_counts': runs['sse_c'].fed.class_counts.tolist(), 'client_counts': runs['sse_c'].fed.client_counts.tolist(),
                  'shots': {g: v.tolist() for g, v in runs['sse_c'].fed.shots.items()}, 'shot_rule': runs['sse_c'].fed.shot_rule,
                  'test_per_class': torch.bincount(runs['sse_c'].fed.y_test).tolist()},
         'classifier_geometry': {c: etf_stats(r.algo.net.sse_c.weight) for c, r in runs.items()}}
    assert torch.equal(runs['etf'].fed.y_train, runs['sse_c'].fed.y_train), 'the two runs must share the federated data'

    # ---- features, class means
    F = {}
    for c, r in runs.items():
        fed, theta = r.fed, r.algo.net.theta
        ht, htr = features(theta, fed.x_test), features(theta, fed.x_train)
        mu, var, _ = class_mean_features(None, ht, fed.y_test, fed.num_classes)
        mu_tr = class_mean_features(None, htr, fed.y_train, fed.num_classes)[0]
        zero = (r.algo.net.sse_c.weight == 0) if (r.algo.net.sse_c.weight == 0).any() else None
        F[c] = dict(ht=ht, mu=mu, var=var, mu_tr=mu_tr, zero=zero, fed=fed)

    # ---- 1. feature degeneration (Fig. 1)
    deg, prof_rows = {}, []
    fig, axs = plt.subplots(2, 2, figsize=(14, 6.4))
    for i, c in enumerate(('etf', 'sse_c')):
        f = F[c]
        deg[c] = degeneration_summary(f['mu'], f['var'], q=0.5, mask=f['zero'])
        plot_degeneration(f['mu'], f['var'], f['zero'], cls=a.deg_class, ax=axs[i, 0], title=f"{NAMES[c]} backbone: class {a.deg_class}")
        plot_degeneration(f['mu'], f['var'], f['zero'], ax=axs[i, 1], title=f"{NAMES[c]} backbone: rank-wise mean over classes")
        sm, sv, sk = sorted_profiles(f['mu'], f['var'], f['zero'])
        for rk in range(sm.shape[1]):
            prof_rows.append(dict(backbone=c, rank=rk, mean=sm[:, rk].mean().item(), var=sv[:, rk].mean().item(),
                                  zero_frac=None if sk is None else sk[:, rk].double().mean().item(),
                                  **{f'mean_c{a.deg_class}': sm[a.deg_class, rk].item(), f'var_c{a.deg_class}': sv[a.deg_class, rk].item()}))
    # the ETF backbone's numbers on the SSE-C run's zero pattern: what "masked" would mean without sparsity (baseline beta)
    deg['etf_on_sse_c_mask'] = degeneration_summary(F['etf']['mu'], F['etf']['var'], q=0.5, mask=F['sse_c']['zero'])
    fig.suptitle('Feature degeneration (test-set class means, dims sorted by mean; grey: zeros of the SSE-C column)')
    fig.tight_layout(); fig.savefig(out / 'degeneration.png', dpi=110); plt.close(fig)
    pd.DataFrame(prof_rows).to_csv(out / 'degeneration_profiles.csv', index=False)
    N['degeneration'] = deg

    # ---- 2. pruning (Fig. 3)
    ratios = np.round(np.linspace(0, 1, 21), 3)
    rows, prune = [], {}
    fig, axs = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, c in zip(axs, ('etf', 'sse_c')):
        f, r = F[c], runs[c]
        heads = {'fixed': r.algo.net.sse_c.weight.T, 'ga_fr': ga_fr(r.algo.net.psi.weight.detach())}
        curves = {}
        for hn, W in heads.items():
            for o in ('ascending', 'descending'):
                acc = pruning_curve(f['ht'], f['fed'].y_test, W, f['mu_tr'], ratios, o, by='class')
                curves[f"{'fixed ' + NAMES[c] if hn == 'fixed' else 'GA-FR psi'} {o}"] = acc
                rows += [dict(backbone=c, head=hn, order=o, ratio=float(q), acc=float(v)) for q, v in zip(ratios, acc)]
                prune[f'{c}/{hn}/{o}'] = {'acc_0': acc[0], 'acc_25': acc[5], 'acc_50': acc[10], 'acc_75': acc[15], 'mean_over_ratios': acc.mean()}
        plot_pruning(ratios, curves, ax=ax, title=f'{NAMES[c]} backbone')
        for ln in ax.get_lines():
            if 'GA-FR' in ln.get_label(): ln.set_linestyle('--')
        ax.legend(fontsize=7)
    fig.suptitle('Pruning classifier weights by class-mean order (per class; means from training features)')
    fig.tight_layout(); fig.savefig(out / 'pruning.png', dpi=110); plt.close(fig)
    pd.DataFrame(rows).to_csv(out / 'pruning.csv', index=False)
    N['pruning'] = prune

    # ---- 3. class-mean geometry and t-SNE (Fig. 6)
    geo = {}
    fig, axs = plt.subplots(1, 2, figsize=(11, 5.4))
    g = torch.Generator().manual_seed(a.seed)
    for ax, c in zip(axs, ('etf', 'sse_c')):
        f = F[c]; y = f['fed'].y_test
        geo[c] = class_mean_angles(f['mu'])
        geo[c + '_train_means'] = class_mean_angles(f['mu_tr'])
        idx = torch.cat([torch.nonzero(y == k).flatten()[torch.randperm(int((y == k).sum()), generator=g)[:a.tsne_per_class]] for k in range(f['fed'].num_classes)])
        m2, s2 = tsne_embed(f['mu'], f['ht'][idx], seed=a.seed)
        st = geo[c]
        plot_tsne(m2, s2, y[idx], ax=ax, names=None,
                  title=f"{NAMES[c]}: angles {st['angle_mean']:.1f} +- {st['angle_std']:.1f} deg (min {st['angle_min']:.1f}; ETF {st['etf_angle']:.1f})")
    fig.suptitle(f't-SNE of test features ({a.tsne_per_class}/class, dots) with the class means (stars)')
    fig.tight_layout(); fig.savefig(out / 'tsne.png', dpi=110); plt.close(fig)
    N['class_mean_geometry'] = geo

    # ---- 4. norms vs counts, Table 7
    norms, t7 = {}, {}
    fig, axs = plt.subplots(2, 2, figsize=(10, 7))
    per_client = {}
    for i, c in enumerate(('etf', 'sse_c')):
        r = runs[c]; fed = r.fed
        psi = r.algo.net.psi.weight.detach()
        cl = client_norm_correlations(r.client_states, fed.client_counts)
        cl_nz = client_norm_correlations(r.client_states, fed.client_counts, exclude_zero=True)
        sp, spz = np.array([x['spearman'] for x in cl], float), np.array([x['spearman'] for x in cl_nz], float)
        norms[c] = {'psi_vs_global': norm_count_correlation(psi, fed.class_counts),
                    'psi_ga_fr_vs_global': norm_count_correlation(ga_fr(psi), fed.class_counts),
                    'phi_vs_local_spearman': {'mean': np.nanmean(sp), 'median': np.nanmedian(sp), 'min': np.nanmin(sp),
                                              'positive': int((sp > 0).sum()), 'defined': int((~np.isnan(sp)).sum()), 'per_client': sp.tolist()},
                    'phi_vs_local_spearman_seen_classes': {'mean': np.nanmean(spz), 'median': np.nanmedian(spz), 'min': np.nanmin(spz),
                                                           'positive': int((spz > 0).sum()), 'defined': int((~np.isnan(spz)).sum()), 'per_client': spz.tolist()}}
        plot_norms(psi, fed.class_counts, [cs['phi'] for cs in r.client_states], fed.client_counts, axs=axs[i])
        axs[i, 0].set_title(rf"{NAMES[c]}: $\psi$ (Spearman {norms[c]['psi_vs_global']['spearman']:.2f})", fontsize=10)
        axs[i, 1].set_title(rf"{NAMES[c]}: $\phi_k$ (median Spearman {np.nanmedian(sp):.2f}; seen {np.nanmedian(spz):.2f})", fontsize=10)
        pc = per_client[c] = client_mode_accuracy(r.algo, r.clients, r.client_states)
        t7[c] = pm_table(pc, ['la_fr_noft', 'la_fr_dist', 'la_fr_ref', 'phi', 'ga_fr'])
    fig.tight_layout(); fig.savefig(out / 'norms.png', dpi=110); plt.close(fig)
    pd.concat(t7, names=['backbone', 'mode']).to_csv(out / 'table7.csv')
    N['norms'] = norms
    N['table7'] = {c: t.to_dict(orient='index') for c, t in t7.items()}

    # ---- 5. realignment: GM groups before/after GA-FR, per-client PM before/after LA-FR, finetuning curve (Fig. 5)
    gm, real, ft = {}, {}, {}
    fig, axs = plt.subplots(2, 3, figsize=(16, 7))
    for i, c in enumerate(('etf', 'sse_c')):
        r = runs[c]; pc = per_client[c]
        gm[c] = gm_groups(r.algo, r.fed)
        plot_gm_groups(gm[c], axs[i, 0], modes=['sse_c', 'psi', 'ga_fr'], title=f'{NAMES[c]}: generic model',
                       labels={'sse_c': f'fixed {NAMES[c]}', 'psi': 'psi (before GA-FR)', 'ga_fr': 'GA-FR'})
        b, af, rf = pc['phi']['acc'], pc['la_fr_noft']['acc'], pc['la_fr_ref']['acc']
        ok = ~np.isnan(b)
        real[c] = {'pm_phi': np.nanmean(b), 'pm_la_fr': np.nanmean(af), 'pm_la_fr_ref': np.nanmean(rf),
                   'clients_improved_by_la_fr': int((af[ok] > b[ok]).sum()), 'clients_worse_by_la_fr': int((af[ok] < b[ok]).sum()),
                   'clients': int(ok.sum()), 'mean_gain': float(np.nanmean(af - b)),
                   'per_client_phi': b.tolist(), 'per_client_la_fr': af.tolist()}
        plot_client_pm(b, af, axs[i, 1], labels=(r'$\phi_k$ alone', r"LA-FR $\phi'_k$"), title=f'{NAMES[c]}: personalised, per client')
        cur = finetune_curve(r.algo, r.clients, r.client_states, cfgs[c], epochs=range(a.ft_epochs + 1))
        small = finetune_curve(r.algo, r.clients, r.client_states, cfgs[c], epochs=range(a.ft_epochs + 1), lr=a.ft_lr_small)
        ft[c], ft[c + f'_lr{a.ft_lr_small:g}'] = cur, small
        plot_finetune_curve(cur, axs[i, 2], refs={r'$\phi_k$ alone': np.nanmean(b), r"$\phi_k+\phi'_k$ (reference)": np.nanmean(rf),
                                                  'GA-FR (generic) on local': np.nanmean(pc['ga_fr']['acc'])},
                            others={f'finetuning lr {a.ft_lr_small:g} (avg)': small},
                            title=f'{NAMES[c]}: LA-FR + local finetuning (lr {cfgs[c].lr:g} unless noted)')
    fig.tight_layout(); fig.savefig(out / 'realignment.png', dpi=110); plt.close(fig)
    pd.concat(gm, names=['backbone', 'mode']).to_csv(out / 'gm_groups.csv')
    pd.concat({c: v[['pm_acc', 'pm_acc_weighted']] for c, v in ft.items()}, names=['backbone', 'epochs']).to_csv(out / 'finetune_curve.csv')
    N['gm_groups'] = {c: t.to_dict(orient='index') for c, t in gm.items()}
    N['la_fr_per_client'] = real
    N['finetune_curve'] = {c: {'pm_acc': v['pm_acc'].tolist(), 'pm_acc_weighted': v['pm_acc_weighted'].tolist(),
                               'best_epoch': int(v['pm_acc'].idxmax()), 'best': float(v['pm_acc'].max())} for c, v in ft.items()}
    N['analysis_seconds'] = time.time() - t_start
    (out / 'numbers.json').write_text(json.dumps(r4(N), indent=1) + '\n')
    print(json.dumps(r4({k: N[k] for k in ('degeneration', 'pruning', 'class_mean_geometry', 'table7', 'gm_groups', 'finetune_curve')}), indent=1)[:6000])
    print(f'wrote {out}/ in {time.time() - t_start:.0f}s')


if __name__ == '__main__':
    main()
