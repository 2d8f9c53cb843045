"""Flower backend: the same GM/PM numbers as the in-process engine (one Ray simulation for three methods), and the CLI's input checks."""
import csv, json, math
import pytest
from fedloge_nb.federated import FedConfig
from fedloge_nb.engine import run_fl
from fedloge_nb.flower_simulation import run_flower

METHODS = ['fedavg', 'fedloge', 'fedrep']          # generic, FedLoGe (realignment + finetuning stages), personalised
TINY = ['--dataset', 'digits', '--imb_factor', '10', '--clients', '3', '--model', 'mlp', '--rounds', '1']


def _cfg(method):
    return FedConfig(method=method, dataset='digits', imb_factor=10, clients=5, frac=0.6, rounds=4, model='mlp', batch_size=16,
                     seed=1, eval_every=2, device='cpu', hp={'sse_steps': 200} if method == 'fedloge' else {})


def _same(a, b): return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def test_flower_simulation_equals_local_engine(tmp_path):
    cfgs = [_cfg(m) for m in METHODS]
    local = [run_fl(c, progress=False) for c in cfgs]
    outs = [tmp_path / m for m in METHODS]
    flower = run_flower(cfgs, out=outs, workers=2, progress=False)
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
