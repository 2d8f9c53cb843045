"""Write a leaderboard's stage-2 sweep file from its finished stage 1 (the variants chosen on validation).

    .venv/bin/python scripts/leaderboard_stage2.py experiments/leaderboard_val.toml fmnist_if100_a0.5 experiments/leaderboard_if100.toml

Reads the stage-1 sweep's results.csv (its `out`, by default results/sweeps/NAME/), refuses while a cell of the
setting is still pending (a choice on a partial grid would differ from the final one; `--partial` overrides for a
look), and writes the stage-2 file with `fedloge_nb.leaderboard.write_stage2` (chapter 15e).
"""
from __future__ import annotations
import shlex, sys
from pathlib import Path
from fastcore.script import call_parse
from fedloge_nb.aggregate import read_rows
from fedloge_nb.sweep_file import load_spec, expand
from fedloge_nb.leaderboard import write_stage2

@call_parse
def main(stage1: str,            # stage 1's sweep file
         setting: str,           # one of its settings, e.g. fmnist_if100_a0.5
         out: str,               # the stage-2 sweep file to write
         seeds: str = '0,1,2,3,4',  # the leaderboard's seeds (none of stage 1's)
         partial: bool = False):  # write even while stage-1 cells of the setting are pending
    spec = load_spec(stage1)
    res = Path(spec.out or f'results/sweeps/{spec.name}')/'results.csv'
    if not res.exists(): sys.exit(f"no {res}: run stage 1 first (fedloge_nb sweep {stage1})")
    cells = [c.name for c in expand(spec) if c.setting == setting]          # the cells the file has now (rows of removed ones are not read)
    if not cells: sys.exit(f"{stage1} has no setting {setting!r}; its settings: {sorted({c.setting for c in expand(spec)})}")
    status = {r['cell']: r.get('status') for r in read_rows(res)}
    rows = [r for r in read_rows(res) if r['cell'] in set(cells)]
    pending = [c for c in cells if status.get(c) not in ('ok', 'failed')]
    if pending and not partial: sys.exit(f"{len(pending)} stage-1 cell(s) of {setting} not finished (e.g. {pending[0]}): finish stage 1 or pass --partial")
    cmd = ' '.join(['.venv/bin/python', 'scripts/leaderboard_stage2.py'] + [shlex.quote(a) for a in sys.argv[1:]])
    s2 = write_stage2(stage1, rows, setting, out, [int(s) for s in seeds.split(',')], command=cmd)
    print(f"wrote {out}: {len(s2.methods)} methods, {len(s2.overrides)} overrides; chosen GM {s2.meta.get('chosen_gm')}; chosen PM {s2.meta.get('chosen_pm')}")
    if s2.meta.get('out_of_stage1'): print(f"out (no stage-1 variant finished: all failed, or none ran yet): {', '.join(s2.meta['out_of_stage1'])}")
