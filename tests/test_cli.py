"""End-to-end tests of the `fedloge_nb` console script: runs, kill-and-resume, bad inputs."""
import json, os, subprocess, sys
from pathlib import Path
import pytest

BIN = Path(sys.executable).parent / 'fedloge_nb'
TINY = ['--dataset', 'digits', '--imb_factor', '10', '--clients', '4', '--frac', '1.0', '--model', 'mlp',
        '--batch_size', '16', '--lr', '0.1', '--local_epochs', '2', '--progress', 'false']
ENV = {**os.environ, 'OMP_NUM_THREADS': '1'}

def cli(*args, check=True, timeout=300):
    p = subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True, env=ENV, timeout=timeout)
    if check and p.returncode != 0: raise AssertionError(f"exit {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}")
    return p

def metrics(summary):
    "Everything in a summary except wall-clock times."
    return {k: v for k, v in summary.items() if not k.endswith(('time_s', 'per_round'))}

def test_help_lists_commands(main_in_process):
    p = cli('--help'); assert 'run' in p.stdout and 'compare' in p.stdout
    code, _, err = main_in_process('nosuchcommand'); assert code == 2 and 'unknown command' in err, err

def test_run_fedavg_writes_results(tmp_path):
    out = tmp_path / 'fedavg'
    cli('run', '--method', 'fedavg', *TINY, '--rounds', '4', '--eval_every', '2', '--out', out)
    s = json.loads((out / 'summary.json').read_text())
    for k in ('method', 'dataset', 'seed', 'rounds', 'gm_acc', 'pm_acc', 'gm_many', 'gm_med', 'gm_few'): assert k in s, k
    assert s['method'] == 'fedavg' and s['rounds'] == 4 and 10 < s['gm_acc'] <= 100
    hist = (out / 'history.csv').read_text().splitlines()
    assert hist[0].startswith('round,') and len(hist) == 3          # header + rounds 2 and 4
    cfg = json.loads((out / 'config.json').read_text())
    assert cfg['config']['method'] == 'fedavg' and cfg['config']['rounds'] == 4

def test_run_fedloge_reports_all_modes(tmp_path, main_in_process):
    out = tmp_path / 'fedloge'
    assert main_in_process('run', '--method', 'fedloge', *TINY, '--rounds', '3', '--out', out, '--hp', 'sse_steps=200,sse_lr=0.01')[0] == 0
    s = json.loads((out / 'summary.json').read_text())
    for k in ('gm_acc_sse_c', 'gm_acc_ga_fr', 'pm_acc_la_fr', 'pm_acc_la_fr_ref', 'gm_acc', 'pm_acc'): assert k in s, k
    assert s['gm_acc'] == s['gm_acc_ga_fr'] and s['pm_acc'] == s['pm_acc_la_fr']
    assert s['hp']['sse_steps'] == 200

def test_same_seed_same_numbers(tmp_path, main_in_process):
    "The console script and a second run in this process (another interpreter, the same seed) print the same numbers."
    a = cli('run', *TINY, '--rounds', '2', '--out', tmp_path / 'a').stdout
    code, b, _ = main_in_process('run', *TINY, '--rounds', '2', '--out', tmp_path / 'b'); assert code == 0
    strip = lambda s: {k: v for k, v in json.loads(s.splitlines()[-1]).items() if k != 'out'}
    assert strip(a) == strip(b)

def test_kill_and_resume_equals_uninterrupted(tmp_path, kill_when, main_in_process):
    # mlp on digits: ~0.1 s a round with a checkpoint each round, so the kill lands early in 40 rounds; the killed run is
    # the console script, the uninterrupted and the resumed ones run in this process (one torch thread, as the script)
    args = ['run', '--method', 'fedloge', *TINY, '--rounds', '40', '--eval_every', '5', '--ckpt_every', '1',
            '--hp', 'sse_steps=200,sse_lr=0.01']
    full = tmp_path / 'full'; assert main_in_process(*args, '--out', full)[0] == 0
    killed = tmp_path / 'killed'
    kill_when([BIN, *args, '--out', killed], lambda: (killed / 'checkpoint.pt').exists())
    assert not (killed / 'summary.json').exists(), "the run finished before it could be killed: make it longer"
    import torch
    r = torch.load(killed / 'checkpoint.pt', weights_only=True)['round']
    assert 1 <= r < 40
    # a killed write may leave a *.tmp file beside checkpoint.pt; resuming never reads it
    assert main_in_process(*args, '--out', killed, '--resume', 'true')[0] == 0
    sf, sk = (json.loads((d / 'summary.json').read_text()) for d in (full, killed))
    assert metrics(sf) == metrics(sk)
    assert (full / 'history.csv').read_text().splitlines()[0] == (killed / 'history.csv').read_text().splitlines()[0]

@pytest.mark.parametrize('args,msg', [
    (['--method', 'fedfoo'], 'known methods'),
    (['--dataset', 'mnist9'], 'known datasets'),
    (['--model', 'vgg'], 'known models'),
    (['--frac', '0'], 'frac'),
    (['--frac', '1.5'], 'frac'),
    (['--rounds', '0'], 'rounds'),
    (['--imb_factor', '0.01'], '1/'),
    (['--alpha', '0'], 'alpha'),
    (['--hp', 'beta'], 'key=value'),
    (['--hp', 'nosuch=1'], 'unknown hyperparameters'),
    (['--method', 'fedloge', '--hp', 'gamma=abc'], "gamma='abc' is not a float: gamma takes float > 0"),   # key, type and an example
    (['--method', 'fedloge', '--hp', 'beta=1.5'], 'beta=1.5 is >= 1: beta takes float in [0, 1)'),
    (['--method', 'fedloge', '--hp', 'classifier=sse'], "e.g. --hp classifier=sse_c"),
])
def test_bad_inputs(tmp_path, args, msg, main_in_process):
    # in process (the same dispatcher as the console script; test_bad_input_from_the_shell covers the shell path)
    base = dict(zip(TINY[::2], TINY[1::2]))
    for k, v in zip(args[::2], args[1::2]): base[k] = v
    flat = [x for kv in base.items() for x in kv]
    code, so, se = main_in_process('run', *flat, '--rounds' if '--rounds' not in base else '--eval_every', '1', '--out', tmp_path / 'x')
    assert code == 2, (code, so, se)
    assert msg in se, se
    assert not (tmp_path / 'x' / 'summary.json').exists()

def test_hp_help_lists_the_methods_hyperparameters(tmp_path, main_in_process):
    code, o, _ = main_in_process('run', '--method', 'fedloge', '--hp', 'help', '--out', tmp_path / 'x')   # the table, nothing runs
    assert code == 0 and '| `gamma` | float > 0 | `2.0` |' in o and '--hp' in o and not (tmp_path / 'x').exists(), o
    code, o, _ = main_in_process('run', '--method', 'scaffold+ecl', '--hp', 'help')               # a composed method: base and plug-in
    assert code == 0 and '`eta_g`' in o and '`lws_epochs`' in o

def test_bad_input_from_the_shell(tmp_path):
    p = cli('run', *TINY, '--frac', '0', '--rounds', '1', '--out', tmp_path / 'x', check=False)
    assert p.returncode == 2 and 'frac' in p.stderr and 'Traceback' not in p.stderr, p.stderr

def test_resume_errors(tmp_path, main_in_process):
    code, _, se = main_in_process('run', *TINY, '--rounds', '2', '--out', tmp_path / 'none', '--resume', 'true')
    assert code == 2 and 'without --resume' in se
    out = tmp_path / 'r'; assert main_in_process('run', *TINY, '--rounds', '2', '--out', out)[0] == 0
    (out / 'checkpoint.pt').write_bytes(b'garbage'); (out / 'checkpoint.prev.pt').unlink(missing_ok=True)   # no previous one to fall back on
    code, _, se = main_in_process('run', *TINY, '--rounds', '2', '--out', out, '--resume', 'true')
    assert code == 2 and 'corrupted' in se
    code, _, se = main_in_process('run', *TINY, '--rounds', '3', '--out', out)
    assert code == 2 and 'different config' in se and 'rounds' in se

def test_every_config_field_is_a_flag(tmp_path, main_in_process):
    "run and compare take their flags from FedConfig: every field is listed with its help and reaches the run's config."
    from dataclasses import fields
    from fedloge_nb.federated import FedConfig
    for cmd, skip in (('run', set()), ('compare', {'method', 'seed'})):
        code, so, _ = main_in_process(cmd, '--help')
        assert code == 0
        for f in fields(FedConfig):
            if f.name not in skip: assert f'--{f.name} ' in so, (cmd, f.name)
    code, _, se = main_in_process('run', *TINY, '--rounds', '1', '--min_size', '5', '--shot_rule', 'count', '--out', tmp_path / 'r')
    assert code == 0, se
    c = json.loads((tmp_path / 'r' / 'summary.json').read_text())['config']
    assert c['min_size'] == 5 and c['shot_rule'] == 'count'
    code, _, se = main_in_process('compare', '--methods', 'fedavg', '--seeds', '0,1', '--data_seed', '7', *TINY, '--rounds', '1',
                                  '--out', tmp_path / 'c')
    assert code == 0, se
    cs = [json.loads((tmp_path / 'c' / f'digits_if10_a0.5_fedavg_s{s}' / 'summary.json').read_text())['config'] for s in (0, 1)]
    assert [c['data_seed'] for c in cs] == [7, 7] and [c['seed'] for c in cs] == [0, 1]


def test_killed_compare_resumes(tmp_path, kill_when, midway, main_in_process):
    "compare runs through the sweep runner: after a SIGKILL, the same command keeps the finished runs, continues the cut one, and gives the numbers of an uninterrupted compare."
    args = ['compare', '--methods', 'fedavg,fedprox', '--seeds', '0,1', *TINY, '--rounds', '6', '--eval_every', '2', '--ckpt_every', '1',
            '--hp', 'mu=0.1']
    full = tmp_path / 'full'; assert main_in_process(*args, '--out', full)[0] == 0     # uninterrupted, in this process
    out = tmp_path / 'killed'
    kill_when([BIN, *args, '--out', out], lambda: midway(out))
    done = {s: s.stat().st_mtime_ns for s in out.glob('*/summary.json')}
    assert 1 <= len(done) < 4, f"{len(done)} runs were done when compare was killed: make the runs longer"
    code, _, err = main_in_process(*args, '--out', out)
    assert code == 0 and f'{len(done)} done, {4 - len(done)} to run now' in err, err
    assert {s: s.stat().st_mtime_ns for s in done} == done                # finished runs were not redone
    names = sorted(d.name for d in out.iterdir() if (d / 'summary.json').exists())
    assert names == sorted(d.name for d in full.iterdir() if (d / 'summary.json').exists()) and len(names) == 4
    for n in names:
        assert metrics(json.loads((out / n / 'summary.json').read_text())) == metrics(json.loads((full / n / 'summary.json').read_text())), n
    assert '| fedprox | - |' in (out / 'summary.md').read_text() and not list(out.glob('*/checkpoint.pt'))
