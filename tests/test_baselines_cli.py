"""The baselines of 08_baselines / 08a_baselines_lt through the CLI (`fedloge_nb run` / `compare`) and through resume.

The notebooks test each method's mechanism; these tests check that every name is reachable from the shell, that
hyperparameters are routed per method, that GM is n/a exactly for the methods without a global model, and that an
interrupted run of a method with client or server state resumes to the same numbers.
"""
import dataclasses, json, os, subprocess, sys
from pathlib import Path
import pytest

os.environ.setdefault('OMP_NUM_THREADS', '1')
from fedloge_nb.cli import main
from fedloge_nb.federated import FedConfig, run_fl, get_method, make_algorithm, METHODS, _load_methods

PFL = ['fedprox', 'fedbn', 'fedper', 'fedrep', 'lg_fedavg', 'ditto', 'local']
LT = ['fedrod', 'fedbabu', 'ratio_loss', 'fedlc', 'fedavg_ft', 'lws', 'tau_norm']
NO_GM = {'fedper', 'lg_fedavg', 'local'}
TINY = ['--dataset', 'digits', '--imb_factor', '10', '--clients', '4', '--frac', '0.5', '--model', 'mlp',
        '--batch_size', '16', '--lr', '0.05', '--progress', 'false']
BIN = Path(sys.executable).parent / 'fedloge_nb'


def metrics(summary):
    "Everything in a summary except wall-clock times."
    return {k: v for k, v in summary.items() if not k.endswith(('time_s', 'per_round'))}


def test_all_baselines_registered():
    _load_methods()
    for m in PFL + LT: assert m in METHODS and get_method(m).name == m


@pytest.mark.parametrize('method', PFL + LT)
def test_run_every_baseline(method, tmp_path, capsys):
    out = tmp_path / method
    main(['run', '--method', method, *TINY, '--rounds', '2', '--eval_every', '1', '--out', str(out)])
    s = json.loads((out / 'summary.json').read_text())
    assert s['method'] == method and s['rounds'] == 2
    assert (s['gm_acc'] is None) == (method in NO_GM)
    assert 0 <= s['pm_acc'] <= 100 and s['pm_clients'] == 4
    assert s['hp'] == get_method(method).defaults
    assert len((out / 'history.csv').read_text().splitlines()) == 3       # header + rounds 1, 2
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed['method'] == method and ('gm_acc' in printed) == (method not in NO_GM)


def test_compare_all_baselines(tmp_path, capsys):
    out = tmp_path / 'cmp'
    ms = ['fedavg'] + PFL + LT
    main(['compare', '--methods', ','.join(ms), '--seeds', '0', *TINY, '--rounds', '1', '--out', str(out),
          '--hp', 'fedprox.mu=0,fedlc.tau=0,tau_norm.tau=0,ditto.lam=1'])
    table = (out / 'table.md').read_text()
    rows = {l.split('|')[1].strip(): l for l in table.splitlines() if l.startswith('| ') and not l.startswith('| method')}
    assert set(rows) == set(ms)
    for m in NO_GM: assert rows[m].split('|')[2].strip() == 'n/a', rows[m]
    assert (out / 'results.csv').exists() and (out / 'curves.png').exists()
    res = {json.loads((out / f'{m}_seed0' / 'summary.json').read_text())['method']:
           json.loads((out / f'{m}_seed0' / 'summary.json').read_text()) for m in ms}
    # the routed hyperparameters reach their method only, and the three zero settings reproduce FedAvg
    assert res['fedprox']['hp']['mu'] == 0 and res['ditto']['hp']['lam'] == 1 and res['fedlc']['hp']['tau'] == 0
    for m in ('fedprox', 'fedlc', 'tau_norm'):
        for k in ('gm_acc', 'gm_many', 'gm_med', 'gm_few', 'pm_acc'): assert res[m][k] == res['fedavg'][k], (m, k)
    assert res['ditto']['gm_acc'] == res['fedavg']['gm_acc']              # Ditto's global model is FedAvg's
    # a second call resumes every finished cell instead of re-running it
    before = {m: (out / f'{m}_seed0' / 'summary.json').stat().st_mtime_ns for m in ms}
    main(['compare', '--methods', ','.join(ms), '--seeds', '0', *TINY, '--rounds', '1', '--out', str(out),
          '--hp', 'fedprox.mu=0,fedlc.tau=0,tau_norm.tau=0,ditto.lam=1'])
    assert before == {m: (out / f'{m}_seed0' / 'summary.json').stat().st_mtime_ns for m in ms}


def test_unknown_method_lists_the_baselines():
    p = subprocess.run([str(BIN), 'run', '--method', 'fedsomething', *TINY, '--rounds', '1', '--out', '/tmp/never'],
                       capture_output=True, text=True, env={**os.environ, 'OMP_NUM_THREADS': '1'}, timeout=300)
    assert p.returncode == 2
    for m in PFL + LT + ['fedavg', 'fedloge']: assert m in p.stderr, m


@pytest.mark.parametrize('args, msg', [
    (['run', '--method', 'fedprox', '--hp', 'lam=1'], "unknown hyperparameters ['lam']"),
    (['run', '--method', 'fedprox', '--hp', 'mu=-1'], 'mu must be >= 0'),
    (['run', '--method', 'fedbabu', '--hp', 'ft_part=body'], "'head' or 'all'"),
    (['compare', '--methods', 'fedper,ditto', '--hp', 'tau=1'], "takes hyperparameters ['tau']"),
])
def test_bad_hyperparameters_exit_2(args, msg, tmp_path, main_in_process):
    code, _, se = main_in_process(*args, *TINY, '--rounds', '1', '--out', tmp_path / 'x')
    assert code == 2 and msg in se, (code, se)


class _Stop(Exception): pass


@pytest.mark.parametrize('method, model', [('fedbn', 'resnet8'), ('fedrep', 'mlp'), ('ditto', 'mlp'),
                                           ('ratio_loss', 'mlp'), ('fedrod', 'mlp'), ('lws', 'mlp'), ('local', 'mlp')])
def test_interrupted_run_resumes_to_the_same_numbers(method, model, tmp_path):
    cfg = FedConfig(method=method, dataset='digits', imb_factor=10, clients=4, model=model, frac=0.5, rounds=4,
                    batch_size=16, lr=0.05, eval_every=1, ckpt_every=1, device='cpu')
    full = run_fl(cfg, out=tmp_path / 'full', progress=False)
    algo = make_algorithm(cfg); calls = {'n': 0}; agg = algo.aggregate
    def dying(gstate, results):
        calls['n'] += 1
        if calls['n'] == 3: raise _Stop()                                  # dies in round 3, after round 2's checkpoint
        return agg(gstate, results)
    algo.aggregate = dying
    with pytest.raises(_Stop): run_fl(cfg, out=tmp_path / 'cut', progress=False, algo=algo)
    assert not (tmp_path / 'cut' / 'summary.json').exists()
    resumed = run_fl(cfg, out=tmp_path / 'cut', resume=True, progress=False)
    assert metrics(resumed.summary) == metrics(full.summary)
