"""Flower backend: the same GM/PM numbers as the in-process engine (one Ray simulation for two methods and a killed
job resumed), and the CLI's input checks. (FedAvg, the simplest case, is left to tests/test_flower_methods.py, which
checks every method's message rounds against the engine without Ray; each job here adds to the Ray simulation's cost.)"""
import csv, dataclasses, json, math, os, signal, subprocess, sys
from pathlib import Path
import pytest
from fedloge_nb.federated import FedConfig
from fedloge_nb.engine import run_fl
from fedloge_nb.flower_simulation import run_flower

METHODS = ['fedloge', 'fedrep']          # generic with client state (realignment + finetuning stages), personalised
TINY = ['--dataset', 'digits', '--imb_factor', '10', '--clients', '3', '--model', 'mlp', '--rounds', '1']


def _cfg(method):
    return FedConfig(method=method, dataset='digits', imb_factor=10, clients=5, frac=0.6, rounds=4, model='mlp', batch_size=16,
                     seed=1, eval_every=2, device='cpu', hp={'sse_steps': 200} if method == 'fedloge' else {})


def _same(a, b): return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def _kill_in_round_3(cfg, out):
    """Run `cfg`'s Flower strategy job on `LocalGrid` (the same strategy and ClientApp handlers in one process, the client
    states in OUT/client_state where a simulation keeps them) and SIGKILL it in round 3, after its clients saved their
    states and before the server aggregates (the last checkpoint: round 2). A run this fast leaves no time to aim from
    outside, so the job kills itself at the chosen point."""
    code = ("import json, os, signal; from fedloge_nb import flower as f; from fedloge_nb.federated import FedConfig\n"
            "agg = f.EngineStrategy.aggregate_train\n"
            "def die(self, rnd, replies):\n"
            "    if rnd == 3: os.kill(os.getpid(), signal.SIGKILL)\n"
            "    return agg(self, rnd, replies)\n"
            "f.EngineStrategy.aggregate_train = die\n"
            f"cfg = FedConfig(**json.loads({json.dumps(cfg.__dict__)!r}))\n"
            f"f.EngineStrategy(cfg, out={str(out)!r}, progress=False, state_dir={str(out / 'client_state')!r}).start(f.LocalGrid(cfg.clients))")
    p = subprocess.run([sys.executable, '-c', code], cwd=Path(__file__).resolve().parent.parent, env={**os.environ, 'OMP_NUM_THREADS': '1'},
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]


def test_flower_simulation_equals_local_engine(tmp_path):
    """Two methods in one Ray simulation give the local engine's numbers; in the same simulation, a FedLoGe job killed
    in round 3 (SIGKILL, see `_kill_in_round_3`) resumes from its round-2 checkpoint (`resume=[..., True]`) to the
    numbers of an uninterrupted run."""
    from fedloge_nb.guards import load_checkpoint, save_checkpoint
    cfgs = [_cfg(m) for m in METHODS]
    rcfg, rout = dataclasses.replace(_cfg('fedloge'), seed=0, eval_every=1, ckpt_every=2), tmp_path / 'resumed'
    _kill_in_round_3(rcfg, rout)
    assert load_checkpoint(rout / 'checkpoint.pt')['round'] == 2 and not (rout / 'summary.json').exists()
    assert any((rout / 'client_state').rglob('r3.pt')), 'the clients saved round 3 before the kill'
    ck = load_checkpoint(rout / 'checkpoint.pt'); ck['history'][-1]['train_time_s'] = 12345.0
    save_checkpoint(rout / 'checkpoint.pt', ck)                        # a mark that only a resume carries into history.csv
    local = [run_fl(c, progress=False) for c in cfgs]
    outs = [tmp_path / m for m in METHODS]
    *flower, resumed = run_flower([*cfgs, rcfg], out=[*outs, rout], workers=2, progress=False, resume=[False] * len(cfgs) + [True])
    for m, loc, fl, out in zip(METHODS, local, flower, outs):
        keys = [k for k in loc.summary if k.startswith(('gm_', 'pm_', 'val_', 'phi_', 'psi_')) or k == 'client_acc']
        assert len(keys) >= 8 and 'pm_acc' in keys and 'gm_acc' in keys, (m, keys)
        diff = {k: (loc.summary[k], fl.get(k)) for k in keys if not _same(loc.summary[k], fl.get(k))}
        assert not diff, f"{m}: flower differs from the local engine in {diff}"
        assert fl['backend'] == 'flower' and json.loads((out / 'summary.json').read_text())['pm_acc'] == loc.summary['pm_acc']
        with open(out / 'history.csv', newline='') as f: rows = list(csv.DictReader(f))
        assert [int(r['round']) for r in rows] == [h['round'] for h in loc.history] == [2, 4]
        assert [float(r['pm_acc']) for r in rows] == [h['pm_acc'] for h in loc.history]
        assert all(int(r['clients_answered']) == int(r['clients_asked']) == 3 for r in rows)     # frac 0.6 of 5, nobody lost
    assert local[0].summary['pm_acc'] != local[1].summary['pm_acc']      # the methods really differ: equality above is not trivial
    loc = run_fl(rcfg, progress=False)                                   # the killed job, uninterrupted
    keys = [k for k in loc.summary if k.startswith(('gm_', 'pm_', 'phi_', 'psi_', 'client_acc'))]
    assert {k: resumed[k] for k in keys} == {k: loc.summary[k] for k in keys}
    with open(rout / 'history.csv', newline='') as f: rows = list(csv.DictReader(f))
    assert [float(r['pm_acc']) for r in rows] == [h['pm_acc'] for h in loc.history]
    assert (rows[1]['round'], float(rows[1]['train_time_s'])) == ('2', 12345.0), rows[1]     # resumed, not started over


@pytest.mark.parametrize('args,msg', [(['--backend', 'ray'], "--backend 'ray'"),
                                      (['--backend', 'flower', '--flower_workers', '0'], 'at least 1 Ray actor')])
def test_cli_backend_errors(main_in_process, tmp_path, args, msg):
    code, o, e = main_in_process('run', *TINY, '--out', tmp_path / 'r', *args)
    assert code == 2 and msg in e and not (tmp_path / 'r' / 'summary.json').exists(), e


def test_cli_backend_flower_calls_the_simulation(main_in_process, tmp_path, monkeypatch):
    "The CLI wiring without Ray: checks run first, then run_flower gets the config, the data, OUT and the worker count."
    import fedloge_nb.flower_simulation as fl
    seen = {}
    def fake(cfg, fed, out=None, workers=2, progress=True, **kw):
        seen.update(cfg=cfg, clients=len(fed.train_idx), out=out, workers=workers)
        return {'method': cfg.method, 'gm_acc': 12.5, 'pm_acc': 50.0}
    monkeypatch.setattr(fl, 'run_flower', fake)
    code, o, e = main_in_process('run', *TINY, '--method', 'fedrep', '--out', tmp_path / 'r', '--backend', 'flower', '--flower_workers', '3')
    assert code == 0, e
    assert seen['cfg'].method == 'fedrep' and seen['clients'] == 3 and seen['workers'] == 3 and str(seen['out']) == str(tmp_path / 'r')
    assert json.loads(o.strip().splitlines()[-1]) == {'method': 'fedrep', 'out': str(tmp_path / 'r'), 'gm_acc': 12.5, 'pm_acc': 50.0}


PUBLIC_FLWR = ('flwr.app', 'flwr.clientapp', 'flwr.serverapp', 'flwr.serverapp.strategy', 'flwr.simulation')


def _sources():
    "(name, source text) of every Python file of the package, tests, scripts and Flower App, and every notebook's code cells."
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    for p in [*root.glob('fedloge_nb/*.py'), *root.glob('tests/*.py'), *root.glob('scripts/**/*.py'), *root.glob('flower_app/**/*.py')]:
        yield str(p.relative_to(root)), p.read_text()
    for p in root.glob('nbs/*.ipynb'):
        cells = json.loads(p.read_text())['cells']
        yield str(p.relative_to(root)), '\n'.join(''.join(c['source']) for c in cells if c['cell_type'] == 'code' and not ''.join(c['source']).startswith('%'))


def test_flower_through_its_public_interface_only():
    "No import from, name of, or assignment into a Flower module other than flwr.app / clientapp / serverapp(.strategy) / simulation."
    import ast, re
    mod = re.compile(r'\bflwr(?:\.[A-Za-z_]\w*)+')
    bad = []
    for name, text in _sources():
        if 'flwr' not in text: continue                               # nothing of Flower named: nothing to parse
        for m in mod.finditer(text):                                  # in code, strings and source text run by `python -c` alike
            path = m.group(0).split('.')
            if not any('.'.join(path[:len(p.split('.'))]) == p for p in PUBLIC_FLWR): bad.append(f'{name}: {m.group(0)}')
        try: tree = ast.parse(text)
        except SyntaxError: continue                                  # a notebook cell with shell or magic lines: the text check above covers it
        flwr_names = {a.asname or a.name.split('.')[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names if a.name.split('.')[0] == 'flwr'}
        flwr_names |= {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and (n.module or '').split('.')[0] == 'flwr' for a in n.names}
        for n in ast.walk(tree):
            if isinstance(n, ast.Call) and getattr(n.func, 'id', '') == 'setattr' and n.args and isinstance(n.args[0], (ast.Name, ast.Attribute)):
                base = n.args[0]
                while isinstance(base, ast.Attribute): base = base.value
                if getattr(base, 'id', '') in flwr_names: bad.append(f'{name}:{n.lineno}: setattr on Flower')
            if isinstance(n, (ast.Assign, ast.AugAssign)):
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                    base = t
                    while isinstance(base, ast.Attribute): base = base.value
                    if isinstance(t, ast.Attribute) and getattr(base, 'id', '') in flwr_names: bad.append(f'{name}:{n.lineno}: assignment into Flower')
    assert not bad, 'private Flower names (use only ' + ', '.join(PUBLIC_FLWR) + '):\n' + '\n'.join(bad)
