"""Every registered method through the CLI (`fedloge_nb run` / `compare`) and through resume.

The notebooks test each method's mechanism; these tests check that every name in the registry (`METHODS`, after
importing every method module) is reachable from the shell, that hyperparameters are routed per method, that GM is
n/a exactly for the methods without a global model, and that an interrupted run resumes to the same numbers. The
method lists come from the registry, so a new method is covered without editing this file.
"""
import csv, dataclasses, json, os, subprocess, sys
from pathlib import Path
import pytest

from fedloge_nb.cli import main
import fedloge_nb
from fedloge_nb.federated import FedConfig, METHODS, KINDS
from fedloge_nb.registry import get_method, make_algorithm, load_methods, METHOD_MODULES
from fedloge_nb.engine import run_fl

load_methods()                                       # raises if a method module does not import
ALL = sorted(METHODS)                                 # every registered method
NO_GM = {m for m in ALL if not METHODS[m].has_global}
FAST_HP = {'fedloge': {'sse_steps': 50, 'sse_lr': 0.01},  # speed only: FedLoGe's default SSE-C optimisation takes 10k steps,
           'fedetf': {'p_iters': 2},                    # FedETF's personalisation 20 iterations,
           'fedloge+rela': {'sse_steps': 50, 'sse_lr': 0.01}, 'fedetf+rela': {'p_iters': 2},
           'creff': {'feat_per_class': 20, 'crt_epochs': 20},   # CReFF's classifier re-training 300 epochs every round,
           'clip2fl': {'feat_per_class': 20, 'crt_epochs': 20, 'teacher': 'fedloge_nb.clip2fl:ncm_teacher'},   # and CLIP2FL's (a teacher: CLIP's weights are not here),
           'fedic': {'ft_steps': 5, 'calib_steps': 5, 'distill_steps': 5}}   # FedIC's three server stages 100 steps each
MODEL = {'fedbn': 'resnet8'}                          # FedBN's local BatchNorm state (resumed) needs a model with BatchNorm
DATA = {'fedic': {'server_per_class': 5}}             # FedIC distils on a class-balanced labelled server set
TINY = ['--dataset', 'digits', '--imb_factor', '10', '--clients', '4', '--frac', '0.5', '--model', 'mlp',
        '--batch_size', '16', '--lr', '0.05', '--progress', 'false']
tiny = lambda method: [MODEL.get(method, a) if a == 'mlp' else a for a in TINY]   # TINY with the method's model
BIN = Path(sys.executable).parent / 'fedloge_nb'


def metrics(summary):
    "Everything in a summary except wall-clock times."
    return {k: v for k, v in summary.items() if not k.endswith(('time_s', 'per_round'))}


def test_every_method_module_is_loaded():
    "Every module of the package that registers a method is in METHOD_MODULES (else its methods would be unknown to the CLI)."
    pkg = Path(fedloge_nb.__file__).parent
    registering = {f'fedloge_nb.{f.stem}' for f in pkg.glob('*.py')
                   if ('@register(' in f.read_text() or '@register_plugin(' in f.read_text()) and f.stem != 'federated'}
    assert registering == set(METHOD_MODULES)
    for m in ALL: assert get_method(m).name == m and METHODS[m].kind in KINDS and 'kind' in vars(METHODS[m])
    assert NO_GM == {m for m in ALL if METHODS[m].kind == 'personalised'} and len(ALL) >= 21



def test_readme_methods_table_lists_every_method():
    "README's Methods table names every registered method that is not a composition (BASE+PLUGIN), and no unknown name."
    import re
    text = (Path(fedloge_nb.__file__).parent.parent / 'README.md').read_text()
    section = text.split('\n## Methods\n', 1)[1].split('\n## ', 1)[0]
    rows = [l for l in section.splitlines() if l.startswith('| `')]
    listed = {n for l in rows for n in re.findall(r'`([a-z0-9_]+)`', l.split('|')[1])}
    assert listed == {m for m in ALL if '+' not in m}, (sorted(listed - set(ALL)), sorted({m for m in ALL if '+' not in m} - listed))

def hp_args(method):
    "--hp for FAST_HP (nothing for the other methods)."
    return ['--hp', ','.join(f'{k}={v}' for k, v in FAST_HP[method].items())] if method in FAST_HP else []


class _Stop(Exception): pass


@pytest.mark.parametrize('method', ALL)
def test_every_method_runs_and_resumes(method, tmp_path, capsys):
    """Each method through `fedloge_nb run` (2 rounds, checkpoints every round); then the same config (read back from the
    run's config.json) dies in round 2, after round 1's checkpoint, and resumes to the run's numbers."""
    out = tmp_path / method
    data = [a for k, v in DATA.get(method, {}).items() for a in (f'--{k}', str(v))]
    main(['run', '--method', method, *tiny(method), *data, '--rounds', '2', '--eval_every', '1',
          '--ckpt_every', '1', '--out', str(out), *hp_args(method)])
    s = json.loads((out / 'summary.json').read_text())
    assert s['method'] == method and s['rounds'] == 2
    assert (s['gm_acc'] is None) == (method in NO_GM)
    assert 0 <= s['pm_acc'] <= 100 and s['pm_clients'] == 4
    assert s['hp'] == {**get_method(method).defaults, **FAST_HP.get(method, {})}
    assert len((out / 'history.csv').read_text().splitlines()) == 3       # header + rounds 1, 2
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed['method'] == method and ('gm_acc' in printed) == (method not in NO_GM)
    cfg = FedConfig(**json.loads((out / 'config.json').read_text())['config'], eval_every=1, ckpt_every=1)   # + the run-location fields
    algo, cut = make_algorithm(cfg), tmp_path / 'cut'; agg = algo.aggregate
    def dying(gstate, results):
        if (cut / 'checkpoint.pt').exists(): raise _Stop()                 # dies in round 2, after round 1's checkpoint
        return agg(gstate, results)
    algo.aggregate = dying
    with pytest.raises(_Stop): run_fl(cfg, out=cut, progress=False, algo=algo)
    assert not (cut / 'summary.json').exists()
    resumed = run_fl(cfg, out=cut, resume=True, progress=False)
    assert metrics(resumed.summary) == metrics(s)


SERVER = ['--server_per_class', '5']                 # every method of the comparison gets the same split, FedIC's server set held out
HP = ','.join(['fedprox.mu=0,fedlc.tau=0,tau_norm.tau=0,ditto.lam=1'] + [f'{m}.{k}={v}' for m, d in FAST_HP.items() for k, v in d.items()])


# `compare` over methods of every kind, the ones whose hyperparameters are routed by name among them (every method runs
# through `run` above, its GM n/a exactly without a global model; compare's rows come from the same summaries)
COMPARED = ['fedavg', 'fedprox', 'fedlc', 'tau_norm', 'ditto', 'fedloge', 'fedic', 'fedper', 'local']


def test_compare_methods(tmp_path, capsys):
    out = tmp_path / 'cmp'
    ms = COMPARED
    assert {METHODS[m].kind for m in ms} == set(KINDS) and set(ms) & NO_GM and {'fedloge', 'fedic'} <= set(FAST_HP)
    main(['compare', '--methods', ','.join(ms), '--seeds', '0', *TINY, *SERVER, '--rounds', '1', '--out', str(out), '--hp', HP])
    summ = {r['method']: r for r in csv.DictReader(open(out / 'summary.csv'))}
    assert set(summ) == set(ms) and all(r['n_seeds'] == '1' for r in summ.values())
    for m in ms: assert (summ[m]['gm_acc'] == '') == (m in NO_GM), (m, summ[m]['gm_acc'])    # GM n/a exactly without a global model
    assert (out / 'results.csv').exists() and (out / 'summary.md').exists() and list((out / 'plots').glob('curves_*.png'))
    cell = lambda m: out / f'digits_if10_a0.5_{m}_s0' / 'summary.json'
    res = {json.loads(cell(m).read_text())['method']: json.loads(cell(m).read_text()) for m in ms}
    # the routed hyperparameters reach their method only, and the three zero settings reproduce FedAvg
    assert res['fedprox']['hp']['mu'] == 0 and res['ditto']['hp']['lam'] == 1 and res['fedlc']['hp']['tau'] == 0
    for m in ('fedprox', 'fedlc', 'tau_norm'):
        for k in ('gm_acc', 'gm_many', 'gm_med', 'gm_few', 'pm_acc'): assert res[m][k] == res['fedavg'][k], (m, k)
    assert res['ditto']['gm_acc'] == res['fedavg']['gm_acc']              # Ditto's global model is FedAvg's
    # a second call resumes every finished cell instead of re-running it
    before = {m: cell(m).stat().st_mtime_ns for m in ms}
    main(['compare', '--methods', ','.join(ms), '--seeds', '0', *TINY, *SERVER, '--rounds', '1', '--out', str(out), '--hp', HP])
    assert before == {m: cell(m).stat().st_mtime_ns for m in ms}


def test_unknown_method_lists_every_method():
    p = subprocess.run([str(BIN), 'run', '--method', 'fedsomething', *TINY, '--rounds', '1', '--out', '/tmp/never'],
                       capture_output=True, text=True, env={**os.environ, 'OMP_NUM_THREADS': '1'}, timeout=300)
    assert p.returncode == 2
    for m in ALL: assert m in p.stderr, m


@pytest.mark.parametrize('args, msg', [
    (['run', '--method', 'fedprox', '--hp', 'lam=1'], "unknown hyperparameters ['lam']"),
    (['run', '--method', 'fedprox', '--hp', 'mu=-1'], 'mu=-1 is < 0: mu takes float >= 0'),
    (['run', '--method', 'fedbabu', '--hp', 'ft_part=body'], "'head' or 'all'"),
    (['compare', '--methods', 'fedper,ditto', '--hp', 'tau=1'], "takes hyperparameters ['tau']"),
])
def test_bad_hyperparameters_exit_2(args, msg, tmp_path, main_in_process):
    code, _, se = main_in_process(*args, *TINY, '--rounds', '1', '--out', tmp_path / 'x')
    assert code == 2 and msg in se, (code, se)
