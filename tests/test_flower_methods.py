"""The methods added beside the seeds' (FedDyn, FedMMD, FedRS, FedAwS, CCVR, FedNH; the field's CReFF, Fed-GraB, RUCR, FedYoYo,
FedReLa on FedETF and on FedLoGe, FedNPC, FedIC), the lr schedule and unreliable clients under Flower's message rounds: the engine's Flower strategy on `LocalGrid` (the ClientApp handlers called in process, no Ray) gives the numbers of
the in-process engine, post-training stages included."""
import math
import pytest
from fedloge_nb.federated import FedConfig
from fedloge_nb.engine import run_fl
from fedloge_nb.flower import EngineStrategy, LocalGrid

CASES = [('feddyn', {}), ('fedmmd', {}), ('fedavg+rs', {}), ('scaffold+rs', {}), ('fedaws', {}), ('ccvr', {'calib_epochs': 3}),
         ('fednh', {}), ('fedavg', {'lr_decay': 0.7}),
         ('creff', {'match_steps': 3, 'crt_epochs': 3, 'feat_per_class': 10, 'real_repeats': 2}), ('fedgrab', {'dpa_round': 1}),
         ('clip2fl', {'match_steps': 3, 'crt_epochs': 3, 'feat_per_class': 10, 'real_repeats': 2, 'teacher': 'fedloge_nb.clip2fl:ncm_teacher'}),
         ('rucr', {'crt_epochs': 3}), ('fedyoyo', {'warmup': 1}), ('fednpc', {'npc_epochs': 5, 'npc_samples': 500}),
         ('fedetf+rela', {'p_iters': 2}), ('fedloge+rela', {'sse_steps': 100}),
         ('fedic', {'ft_steps': 5, 'calib_steps': 5, 'distill_steps': 5, 'server_per_class': 5}),
         ('fednova', {'drop_rate': 0.3, 'straggler_rate': 0.6, 'local_epochs': 3, 'straggler_min_epochs': 1}),
         ('fedavg_ft', {'drop_last': True})]
RUN_FIELDS = {'lr_decay', 'drop_rate', 'straggler_rate', 'local_epochs', 'straggler_min_epochs', 'server_per_class', 'drop_last'}   # FedConfig fields, not hyperparameters


def _cfg(method, extra):
    hp = {k: v for k, v in extra.items() if k not in RUN_FIELDS}
    return FedConfig(method=method, dataset='digits', imb_factor=10, clients=4, frac=0.5, rounds=3, model='mlp', batch_size=16,
                     seed=2, eval_every=3, device='cpu', hp=hp, **{k: v for k, v in extra.items() if k in RUN_FIELDS})


def _same(a, b): return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


@pytest.mark.parametrize('method,extra', CASES, ids=[f'{m}{"-decay" if "lr_decay" in e else ""}{"-unreliable" if "drop_rate" in e else ""}{"-drop_last" if "drop_last" in e else ""}' for m, e in CASES])
def test_flower_strategy_equals_local_engine(method, extra):
    cfg = _cfg(method, extra)
    loc = run_fl(cfg, progress=False).summary
    fl = EngineStrategy(cfg, progress=False).start(LocalGrid(cfg.clients))
    keys = [k for k in loc if k.startswith(('gm_', 'pm_')) or k == 'client_acc']
    assert 'gm_acc' in keys and 'pm_acc' in keys
    diff = {k: (loc[k], fl.get(k)) for k in keys if not _same(loc[k], fl.get(k))}
    assert not diff, f"{method}: Flower's message rounds differ from the local engine in {diff}"


def test_lr_schedule_reaches_flower_clients():
    "The decayed run differs from the constant one on both backends (the equality above is not a schedule both ignore)."
    const, decay = _cfg('fedavg', {}), _cfg('fedavg', {'lr_decay': 0.7})
    a = EngineStrategy(const, progress=False).start(LocalGrid(4))
    b = EngineStrategy(decay, progress=False).start(LocalGrid(4))
    assert a['client_acc'] != b['client_acc']


def test_drop_last_reaches_flower_clients():
    "Skipping the last, smaller batch changes the run on the Flower path (the equality above is not a flag both ignore)."
    a = EngineStrategy(_cfg('fedavg_ft', {}), progress=False).start(LocalGrid(4))
    b = EngineStrategy(_cfg('fedavg_ft', {'drop_last': True}), progress=False).start(LocalGrid(4))
    assert a['client_acc'] != b['client_acc']


def test_unreliable_clients_reach_flower_clients():
    "Drops and stragglers change FedNova's run on the Flower path (the equality above is not a setting both ignore), and some happened."
    from fedloge_nb.federated import client_fate
    base = {'local_epochs': 3}
    rel, unrel = _cfg('fednova', base), _cfg('fednova', {**base, 'drop_rate': 0.3, 'straggler_rate': 0.6, 'straggler_min_epochs': 1})
    fates = [client_fate(unrel, r, k) for r in range(1, 4) for k in range(4)]
    assert any(f.dropped for f in fates) and any(f.straggler for f in fates)
    a = EngineStrategy(rel, progress=False).start(LocalGrid(4))
    b = EngineStrategy(unrel, progress=False).start(LocalGrid(4))
    assert a['client_acc'] != b['client_acc']
