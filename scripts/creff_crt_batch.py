"""CReFF's leaderboard cells before and after its re-training batch followed the authors' rule (chapter 08i).

Until 2026-12-07 CReFF re-trained its classifier (Eq. 4) in batches of a fixed 32; the authors' `main.py` passes the
run's local batch size (`batch_size_local_training`) to `feature_re_train`, 64 in the leaderboard, and so does CReFF
now (`crt_batch` None, revision 1 in `REVISIONS`). The sweeps re-made the cells the change turned stale. This script
trains nothing: it reads every CReFF cell of the leaderboard's sweeps as committed at COMMIT (the cells made with the
fixed 32) and as the working tree has them now (only cells made at revision 1), and writes one row per cell and
version, the command in the first line. Chapter 08i reads the file.

    .venv/bin/python scripts/creff_crt_batch.py 01e57dc results/creff_crt_batch/cells.csv
"""
import io, json, subprocess, sys
from pathlib import Path
import pandas as pd

SWEEPS = ('leaderboard_if100', 'leaderboard_if10', 'leaderboard_local', 'leaderboard_val', 'leaderboard_val_local')
KEYS = ('gm_acc', 'gm_acc_lastk', 'gm_many_lastk', 'gm_med_lastk', 'gm_few_lastk', 'pm_acc_lastk', 'val_gm_acc_lastk',
        'val_pm_acc_lastk', 'gm_acc_global_lastk', 'gm_few_global_lastk', 'sec_per_round')


def _row(sweep: str, cell: str, s: dict, version: str, source: str) -> dict:
    cfg = s.get('config') or {}
    crt = (s.get('hp') or {}).get('crt_batch')
    return dict(sweep=sweep, cell=cell, imb_factor=cfg.get('imb_factor'), long_tail=cfg.get('long_tail', 'global'), seed=s.get('seed'),
                version=version, batch_size=cfg.get('batch_size'), crt_batch=cfg.get('batch_size') if crt is None else crt,
                revision=s.get('revision', 0), **{k: s.get(k) for k in KEYS}, cpu=(s.get('environment') or {}).get('cpu'),
                torch=(s.get('environment') or {}).get('torch'), source=source)


def main(commit: str, out: str, root: str = '.'):
    root = Path(root); rows = []
    git = lambda *a: subprocess.run(['git', '-C', str(root), *a], capture_output=True, text=True, check=True).stdout
    full = git('rev-parse', commit).strip()
    for sw in SWEEPS:
        names = sorted({Path(p).parts[3] for p in git('ls-tree', '-r', '--name-only', full, f'results/sweeps/{sw}').splitlines()
                        if '_creff_s' in p and p.endswith('/summary.json')})
        for n in names:
            rows.append(_row(sw, n, json.loads(git('show', f'{full}:results/sweeps/{sw}/{n}/summary.json')), 'fixed 32', full[:12]))
            p = root/'results'/'sweeps'/sw/n/'summary.json'
            s = json.loads(p.read_text()) if p.exists() else {}
            if s.get('revision', 0) >= 1: rows.append(_row(sw, n, s, 'local batch size', 'working tree'))
    df = pd.DataFrame(rows)
    buf = io.StringIO(); df.to_csv(buf, index=False)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(f"# .venv/bin/python scripts/creff_crt_batch.py {commit} {out}\n" + buf.getvalue())
    print(f"{out}: {len(df)} rows, {int((df['version'] == 'local batch size').sum())} re-made cells of {int((df['version'] == 'fixed 32').sum())}")


if __name__ == '__main__':
    if len(sys.argv) != 3: sys.exit(__doc__)
    main(*sys.argv[1:])
