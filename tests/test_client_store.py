"""The client-state store in real runs: what a checkpoint holds, which files stay, and kills at any point of a round.

Chapter 03f tests `ClientStore` alone; the kill/resume test of every method (`test_baselines_cli.py`) runs with fewer
states in memory than clients. Here: a FedLoGe run (each client's phi_k is private) with a cache of 2 states for 6
clients is killed inside a round (after a client's update has been written to its file, before the round's
checkpoint), inside the evaluation, and inside the post-training stage, and each resume ends with the numbers of the
uninterrupted run; the checkpoint holds a manifest, never the states, and old versions are deleted.
"""
import json
import pytest
import torch

from fedloge_nb.engine import run_fl
from fedloge_nb.federated import FedConfig
from fedloge_nb.fedloge import FedLoGe
from fedloge_nb.guards import load_checkpoint
from fedloge_nb.registry import make_algorithm

CFG = dict(method='fedloge', dataset='digits', imb_factor=10, clients=6, frac=0.5, model='mlp', rounds=4, eval_every=2,
           ckpt_every=1, batch_size=16, lr=0.05, seed=0, device='cpu', hp={'sse_steps': 50, 'sse_lr': 0.01}, state_cache=2)


def metrics(s):
    return {k: v for k, v in s.items() if not k.endswith(('time_s', 'per_round'))}


class _Kill(Exception): pass


@pytest.fixture(scope='module')
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp('full') / 'run'
    return out, run_fl(FedConfig(**CFG), out=out, progress=False)


def test_checkpoint_holds_a_manifest_and_old_versions_are_deleted(uninterrupted):
    out, res = uninterrupted
    ck, prev = load_checkpoint(out / 'checkpoint.pt'), load_checkpoint(out / 'checkpoint.prev.pt')
    assert 'clients' not in ck and set(ck['client_store']) == {'manifest', 'kept'}
    m = ck['client_store']['manifest']
    assert set(m) <= set(range(6)) and len(m) >= 4 and all(t.startswith('r') for t in m.values())   # the clients trained so far
    on_disk = {(int(p.parent.name.split('_')[1]), p.stem) for p in (out / 'clients').glob('client_*/*.pt')}
    named = {(k, t) for mm in (m, prev['client_store']['manifest']) for k, t in mm.items()}
    assert on_disk == named                                                                   # nothing else kept
    assert (out / 'checkpoint.pt').stat().st_size < 3 * (out / 'checkpoint.prev.pt').stat().st_size
    phi = load_checkpoint(out / 'clients' / 'client_0' / f"{m[0]}.pt")['phi']
    assert phi.shape == res.client_states[0]['phi'].shape


@pytest.mark.parametrize('where', ['client', 'evaluation', 'finish'])
def test_kill_anywhere_resumes_to_the_same_numbers(uninterrupted, tmp_path, where):
    cfg, out = FedConfig(**CFG), tmp_path / 'cut'
    algo = make_algorithm(cfg)
    calls = {'n': 0}
    if where == 'client':                          # round 3, after its second client (the first one's state already evicted to a file)
        update = algo.client_update
        def dying(gstate, cstate, data, c, seed):
            calls['n'] += 1
            if calls['n'] == 2 * 3 + 2: raise _Kill()
            return update(gstate, cstate, data, c, seed)
        algo.client_update = dying
    elif where == 'evaluation':                    # the evaluation of round 4, after round 4's updates were made
        diag = algo.diagnostics
        def dying(fed, clients, states):
            calls['n'] += 1
            if calls['n'] == 2: raise _Kill()
            return diag(fed, clients, states)
        algo.diagnostics = dying
    else:                                          # the post-training stage, halfway through the clients
        fc = algo.finish_client
        def dying(stage, d, cs, c, msg):
            calls['n'] += 1
            if calls['n'] == 4: raise _Kill()
            return fc(stage, d, cs, c, msg)
        algo.finish_client = dying
    with pytest.raises(_Kill): run_fl(cfg, out=out, progress=False, algo=algo)
    resumed = run_fl(cfg, out=out, resume=True, progress=False)
    assert metrics(resumed.summary) == metrics(uninterrupted[1].summary)


def test_more_memory_changes_no_number(uninterrupted):
    "All states in memory (no file at all) and one at a time give the same run."
    a = run_fl(FedConfig(**{**CFG, 'state_cache': 100}), progress=False)
    b = run_fl(FedConfig(**{**CFG, 'state_cache': 1}), progress=False)
    assert metrics(a.summary) == metrics(b.summary) == metrics(uninterrupted[1].summary)
    assert a.client_states.stats['writes'] == 0 and b.client_states.stats['writes'] > 0
    assert all(torch.equal(x['phi'], y['phi']) for x, y in zip(a.client_states, b.client_states))


def test_bad_state_cache_is_refused():
    with pytest.raises(ValueError, match='state_cache=0: keep at least 1'): FedConfig(**{**CFG, 'state_cache': 0}).validate()


def test_a_finished_sweep_cell_keeps_no_client_states(tmp_path):
    "A sweep cell's client states go with its checkpoints when it finishes (unless --keep_checkpoints): nothing of them is committed."
    from fedloge_nb.sweep import run_cell
    from fedloge_nb.sweep_file import Cell
    cfg = FedConfig(**{**CFG, 'rounds': 2})
    for keep in (False, True):
        cell = Cell(name=f'fedloge_keep{keep}', group='g', setting='s', variant='v', cfg=cfg)
        assert run_cell(cell, tmp_path, keep_checkpoints=keep) == 'ok'
        d = tmp_path / cell.name
        assert (d / 'summary.json').exists() and (d / 'clients').exists() == keep and (d / 'checkpoint.pt').exists() == keep
