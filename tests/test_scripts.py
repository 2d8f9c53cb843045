"The scripts are entry points: the code they run lives in the library (tested in the notebooks)."
import ast, os, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / 'scripts' / 'train_analysis_runs.py'

def _run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          env={**os.environ, 'PYTHONPATH': str(ROOT), 'OMP_NUM_THREADS': '1'}, timeout=120)

def test_train_analysis_runs_is_an_entry_point():
    "Besides its docstring, the script imports the library's main and calls it: no analysis code of its own."
    body = [n for n in ast.parse(SCRIPT.read_text()).body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    assert len(body) == 2, ast.dump(ast.Module(body=body, type_ignores=[]))
    assert isinstance(body[0], ast.ImportFrom) and body[0].module == 'fedloge_nb.analysis_runs' and [a.name for a in body[0].names] == ['main']
    assert isinstance(body[1], ast.If) and 'main()' in ast.unparse(body[1])

def test_train_analysis_runs_flags():
    "--help lists the flags of the committed command (and --hp); a malformed value stops before anything is trained."
    r = _run('--help')
    assert r.returncode == 0, r.stderr
    for flag in ('--rounds', '--frac', '--local_epochs', '--batch_size', '--lr', '--seed', '--cache', '--out', '--hp', '--tsne_per_class', '--ft_lr_small'):
        assert flag in r.stdout, flag
    r = _run('--rounds', 'ten')
    assert r.returncode == 2 and '--rounds' in r.stderr and 'invalid int value' in r.stderr, r.stderr

def test_device_check_on_cpu(tmp_path):
    "scripts/device_check.py on the CPU against the CPU: every method runs, its model stays on the CPU, the numbers are equal."
    out = tmp_path / 'check.csv'
    r = subprocess.run([sys.executable, str(ROOT / 'scripts' / 'device_check.py'), '--device', 'cpu', '--dataset', 'digits',
                        '--model', 'mlp', '--methods', 'fedavg,scaffold,lws', '--rounds', '1', '--out', str(out)],
                       capture_output=True, text=True, env={**os.environ, 'PYTHONPATH': str(ROOT), 'OMP_NUM_THREADS': '1'}, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    import csv
    rows = list(csv.DictReader(out.open()))
    assert [x['method'] for x in rows] == ['fedavg', 'scaffold', 'lws'], rows
    assert all(float(x['gm_absdiff']) == 0 and float(x['pm_absdiff']) == 0 and float(x['pm_dev']) > 0 for x in rows), rows

def test_leaderboard_stage2(tmp_path):
    "scripts/leaderboard_stage2.py refuses while a stage-1 cell of the setting is pending, then writes a stage-2 sweep of the chosen variants only."
    s1 = tmp_path / 's1.toml'
    s1.write_text(f'name = "s1"\nout = "{tmp_path / "s1"}"\n[base]\ndataset = "digits"\nmodel = "mlp"\nclients = 4\nval_frac = 0.1\nimb_factor = 10\n'
                  '[grid]\nmethods = ["fedavg", "fedloge"]\nseeds = [100]\n'
                  'overrides = [{}, {label = "gamma8", hp = {"fedloge.gamma" = 8.0}}]\n')
    (tmp_path / 's1').mkdir()
    head = 'cell,group,setting,method,variant,seed,status,val_gm_acc,val_pm_acc\n'
    rows = ['digits_if10_a0.5_fedavg_s100,digits_if10_a0.5_fedavg,digits_if10_a0.5,fedavg,,100,ok,70,80',
            'digits_if10_a0.5_fedloge_s100,digits_if10_a0.5_fedloge,digits_if10_a0.5,fedloge,,100,ok,72,90',
            'digits_if10_a0.5_fedloge_gamma8_s100,digits_if10_a0.5_fedloge_gamma8,digits_if10_a0.5,fedloge,gamma8,100,pending,,']
    (tmp_path / 's1' / 'results.csv').write_text(head + '\n'.join(rows) + '\n')
    run = lambda: subprocess.run([sys.executable, str(ROOT / 'scripts' / 'leaderboard_stage2.py'), str(s1), 'digits_if10_a0.5', str(tmp_path / 's2.toml'), '--seeds', '0,1'],
                                 capture_output=True, text=True, env={**os.environ, 'PYTHONPATH': str(ROOT)}, timeout=120)
    r = run()
    assert r.returncode != 0 and '1 stage-1 cell(s) of digits_if10_a0.5 not finished' in r.stderr and not (tmp_path / 's2.toml').exists(), r.stderr
    (tmp_path / 's1' / 'results.csv').write_text(head + '\n'.join(rows[:2] + [rows[2].replace('pending,,', 'ok,75,88')]) + '\n')
    r = run()
    assert r.returncode == 0, r.stderr
    from fedloge_nb.sweep_file import load_spec, expand
    names = sorted(c.name for c in expand(load_spec(tmp_path / 's2.toml')))
    assert names == sorted(f'digits_if10_a0.5_{g}_s{s}' for s in (0, 1) for g in ('fedavg', 'fedloge', 'fedloge_gamma8')), names

def test_ft_probe(tmp_path):
    "scripts/ft_probe.py on a tiny FedAvg-FT run: one row per client, the as-run column equals the run's PM; other methods refused."
    import csv, json
    cfg = dict(method='fedavg_ft', dataset='digits', imb_factor=10, alpha=0.5, clients=3, model='mlp', rounds=2, frac=1.0,
               batch_size=16, post_epochs=1, seed=0)
    (tmp_path / 'config.json').write_text(json.dumps({'config': cfg}))
    env = {**os.environ, 'PYTHONPATH': str(ROOT), 'OMP_NUM_THREADS': '1'}
    r = subprocess.run([sys.executable, str(ROOT / 'scripts' / 'ft_probe.py'), str(tmp_path / 'config.json'), str(tmp_path / 'p.csv')],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    rows = list(csv.DictReader((tmp_path / 'p.csv').open()))
    assert [int(x['client']) for x in rows] == [0, 1, 2], rows
    assert all(0 < int(x['last_batch']) <= 16 for x in rows), rows
    mean_ft = sum(float(x['acc_ft']) for x in rows) / 3
    pm = float(r.stdout.split('run pm_acc')[1])
    assert abs(mean_ft - pm) < 0.01, (mean_ft, pm)                  # clients weighted equally, as pm_acc is
    (tmp_path / 'c2.json').write_text(json.dumps({'config': {**cfg, 'method': 'fedavg'}}))
    r = subprocess.run([sys.executable, str(ROOT / 'scripts' / 'ft_probe.py'), str(tmp_path / 'c2.json'), str(tmp_path / 'q.csv')],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode != 0 and 'give a fedavg_ft config.json' in r.stderr and not (tmp_path / 'q.csv').exists(), r.stderr

def test_ft_probe_scan(tmp_path):
    "--scan pairs each FedAvg-FT cell with the FedAvg cell of its seed, client by client, and counts the collapses by last-batch size."
    import csv, json
    cfg = dict(method='fedavg_ft', dataset='digits', imb_factor=10, alpha=0.5, clients=3, model='mlp', rounds=2, batch_size=16, seed=0)
    for name, acc in (('d_fedavg_ft_s0', [50.0, 90.0, 10.0]), ('d_fedavg_s0', [80.0, 85.0, 40.0])):
        d = tmp_path / 'results' / 'sweeps' / 'toy' / name; d.mkdir(parents=True)
        (d / 'summary.json').write_text(json.dumps({'client_acc': acc})); (d / 'config.json').write_text(json.dumps({'config': cfg}))
    r = subprocess.run([sys.executable, str(ROOT / 'scripts' / 'ft_probe.py'), '--scan', 'toy', str(tmp_path / 's.csv')], cwd=tmp_path,
                       capture_output=True, text=True, env={**os.environ, 'PYTHONPATH': str(ROOT), 'OMP_NUM_THREADS': '1'}, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = list(csv.DictReader((tmp_path / 's.csv').open()))
    assert [round(float(x['change']), 1) for x in rows] == [-30.0, 5.0, -30.0], rows
    assert '3 client finetunes in 1 cells' in r.stdout, r.stdout

def test_yoyo_prior_order(tmp_path):
    """scripts/yoyo_prior_order.py on one round of tiny FedYoYo: the authors' order trains round 1 on the prior that our order's
    server holds only after it (the same measurements, folded in by the same rule); other methods refused."""
    import json
    cfg = dict(method='fedyoyo', dataset='digits', imb_factor=10, alpha=0.5, clients=4, model='mlp', rounds=2, frac=0.5,
               batch_size=16, seed=0, hp={'warmup': 0})
    (tmp_path / 'config.json').write_text(json.dumps({'config': cfg}))
    env = {**os.environ, 'PYTHONPATH': str(ROOT), 'OMP_NUM_THREADS': '1'}
    run = lambda c, *a: subprocess.run([sys.executable, str(ROOT / 'scripts' / 'yoyo_prior_order.py'), *a, str(tmp_path / c), str(tmp_path / 'o.json')],
                                       capture_output=True, text=True, env=env, timeout=300)
    r = run('config.json', '--rounds', '1')
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    o = json.loads((tmp_path / 'o.json').read_text())
    assert o['rounds'] == 1 and o['same_round_prior_round1'] == o['next_round']['yoyo_prior'] == o['same_round']['yoyo_prior'], o
    assert max(o['same_round_prior_round1']) > 1.5 * min(o['same_round_prior_round1']), o           # not the uniform prior
    assert o['same_round']['gm_acc'] != o['next_round']['gm_acc'], o                                  # round 1 trained otherwise
    (tmp_path / 'c2.json').write_text(json.dumps({'config': {**cfg, 'method': 'fedavg'}})); (tmp_path / 'o.json').unlink()
    r = run('c2.json')
    assert r.returncode != 0 and 'give a fedyoyo config.json' in r.stderr and not (tmp_path / 'o.json').exists(), r.stderr
