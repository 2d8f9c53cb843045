"""Validation split, selection on validation only, and the matched post-training budget, across every registered method."""
import dataclasses, json
import pytest, torch
from fedloge_nb.federated import FedConfig, METHODS, Algorithm
from fedloge_nb.registry import load_methods, make_algorithm, matched_hp
from fedloge_nb.engine import start_run, run_fl
from fedloge_nb.data import make_fed_data

load_methods()
TINY_HP = {'fedloge': dict(sse_steps=50, sse_lr=1e-2), 'fedrep': dict(head_epochs=1), 'fedloge+rela': dict(sse_steps=50, sse_lr=1e-2),
           'creff': dict(feat_per_class=20, crt_epochs=20), 'clip2fl': dict(feat_per_class=20, crt_epochs=20, teacher='fedloge_nb.clip2fl:ncm_teacher'),
           'fedic': dict(ft_steps=5, calib_steps=5, distill_steps=5)}


@pytest.fixture(scope='module')
def fed(): return make_fed_data('digits', imb_factor=10, alpha=0.5, clients=3, seed=0, val_frac=0.1, server_per_class=5)   # FedIC's server set


def _cfg(method, hp=None, **kw):
    return FedConfig(method=method, dataset='digits', imb_factor=10, clients=3, model='mlp', frac=1.0, rounds=1,
                     batch_size=32, lr=0.05, device='cpu', hp={**TINY_HP.get(method, {}), **(hp or {})}, val_frac=0.1, **kw)


def _finish_steps(method, fed, epochs, monkeypatch):
    "Optimizer steps taken by `finish` with --post_epochs `epochs` (None: the method's own budget)."
    cfg = _cfg(method, post_epochs=epochs)
    algo = make_algorithm(cfg); clients, states, _ = start_run(algo, fed, cfg)
    n = [0]
    for opt in (torch.optim.SGD, torch.optim.Adam):
        orig = opt.step
        def step(self, *a, _orig=orig, **k): n[0] += 1; return _orig(self, *a, **k)
        monkeypatch.setattr(opt, 'step', step)
    algo.finish(fed, cfg, clients, states)
    monkeypatch.undo()
    return n[0]


@pytest.mark.parametrize('method', sorted(METHODS))
def test_post_budget_reaches_every_adapting_method(method, fed, monkeypatch):
    cls = METHODS[method]
    if cls.post_hp(3) is None:           # declares no post-training adaptation: its finish must not train
        assert _finish_steps(method, fed, None, monkeypatch) == 0, f"{method} trains after the last round but has no post_hp"
        assert matched_hp(cls, _cfg(method, post_epochs=3)) == {}
    else:                                # the knob sets its budget: 0 epochs = no steps, more epochs = more steps
        s0, s1, s2 = (_finish_steps(method, fed, e, monkeypatch) for e in (0, 1, 2))
        assert s0 == 0 < s1 < s2, (method, s0, s1, s2)
        hp = make_algorithm(_cfg(method, post_epochs=4)).hp
        assert all(hp[k] == v for k, v in cls.post_hp(4).items())


def test_post_epochs_clash_and_own_budget(fed):
    with pytest.raises(ValueError, match='drop one of the two'):
        make_algorithm(_cfg('fedavg_ft', post_epochs=2, hp={'ft_epochs': 7}))
    r = run_fl(_cfg('fedavg_ft', post_epochs=1), fed, progress=False)
    own = run_fl(_cfg('fedavg_ft'), fed, progress=False)               # the method's own budget (5 epochs) in its own run
    assert r.summary['hp']['ft_epochs'] == 1 and r.summary['own_hp']['ft_epochs'] == 5
    assert r.summary['own_pm_acc'] == own.summary['pm_acc']            # own_* = the same model with its own budget
    assert r.summary['gm_acc'] == own.summary['gm_acc']


def test_selection_never_reads_test_data(fed):
    "FedLoGe's finetuning-lr choice with the test sets removed: it must run and pick the same lr."
    cfg = _cfg('fedloge', hp={'ft_epochs': 1, 'ft_lr': [0.001, 0.1]})
    algo = make_algorithm(cfg); clients, states, _ = start_run(algo, fed, cfg)
    a = algo.finish(fed, cfg, clients, states); pick = algo.ft_choice['ft_lr_selected']
    blind = [dataclasses.replace(d, x_test=None, y_test=None) for d in clients]   # any use of test data would raise
    algo2 = make_algorithm(cfg); start_run(algo2, fed, cfg)
    algo2.finish(fed, cfg, blind, states)
    assert algo2.ft_choice == algo.ft_choice and pick in (0.001, 0.1)


def test_cli_val_frac_and_post_epochs(main_in_process, tmp_path):
    out = tmp_path/'r'
    code, o, e = main_in_process('run', '--method', 'fedavg_ft', '--dataset', 'digits', '--imb_factor', 10, '--clients', 3,
                                 '--model', 'mlp', '--frac', 1.0, '--rounds', 2, '--eval_every', 1, '--batch_size', 32,
                                 '--val_frac', 0.1, '--post_epochs', 1, '--last_k', 2, '--device', 'cpu', '--out', out, '--progress', 'false')
    assert code == 0, e
    s = json.loads((out/'summary.json').read_text())
    assert s['config']['val_frac'] == 0.1 and s['config']['post_epochs'] == 1 and s['last_k'] == 2
    assert s['hp']['ft_epochs'] == 1 and s['own_hp']['ft_epochs'] == 5
    for k in ('val_gm_acc', 'val_pm_acc', 'own_pm_acc', 'gm_acc_lastk'): assert k in s, k
    code, o, e = main_in_process('run', '--dataset', 'digits', '--val_frac', 0.7, '--out', tmp_path/'bad')
    assert code != 0 and '--val_frac 0.1' in e and not (tmp_path/'bad').exists()
