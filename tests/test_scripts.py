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
