"""Every sweep file of experiments/papers/ end to end on synthetic data in the real on-disk formats, never downloading.

The data root ($FEDLOGE_DATA) is a temporary folder the module writes once: CIFAR-10 and CIFAR-100 as torchvision's
python-pickle batches (`cifar-10-batches-py/data_batch_1..5`, `test_batch`, `batches.meta`; `cifar-100-python/train`,
`test`, `meta`) with a handful of images per class, ImageNet-LT as Liu et al.'s file lists beside tiny PNGs
(`ImageNet_LT/ImageNet_LT_{train,test}.txt`) and iNaturalist-160k as image folders (`iNaturalist_User_160k/{train,test}/
<class>/*.png`), both long-tailed. Each file is checked twice: its full grid through `--dry_run` (every cell named,
checked and costed: the grid's shape is fixed here), and a few of its cells run for real with `fedloge_nb sweep
--override` (one or two rounds, one local epoch, few clients; ResNet-50's image size 32) and `--only`: the file's own models,
datasets, loaders, partitions and methods. `FEDLOGE_PAPERS_ALL=1` runs every method of one setting of each file instead
(minutes: FedETF's personalisation and CCVR's calibration on ResNets are the slow ones).
"""
import os, pickle
from pathlib import Path
import numpy as np
import pytest
from fedloge_nb.aggregate import read_rows
from fedloge_nb.sweep_file import load_spec, expand

PAPERS = Path(__file__).resolve().parents[1] / 'experiments' / 'papers'
ALL = os.environ.get('FEDLOGE_PAPERS_ALL') == '1'

# file -> (cells in its grid, the cells run here (--only), the same with every method of one setting, --override).
# ResNet-50 gets two rounds with every client: after one round of a few batches its BatchNorm running statistics are far
# from the activations of the untrained network, and the heads trained after training on its eval-mode features
# (FedLoGe's LA-FR finetuning, FedETF's projection) overflowed (DivergenceError); after two rounds they do not.
FILES = {
    'fedloge_table1': (264, r'^cifar10_if100_a0.5_fedloge_s0$', r'^cifar10_if100_a0.5_.*_s0$',
                       'rounds=1,clients=6,frac=0.2,local_epochs=1'),
    'fedloge_table3': (6, r'_etf_s0$', r'_s0$', 'rounds=1,clients=6,frac=0.2,local_epochs=1'),
    'fedloge_table2_imagenet': (11, r'_fedloge_s0$', r'_s0$', 'rounds=2,clients=4,frac=1.0,local_epochs=1,dataset=imagenetlt@32'),
    'fedloge_table2_inat': (11, r'_fedper_s0$', r'_s0$', 'rounds=2,clients=4,frac=1.0,local_epochs=1,dataset=inat160k@32'),
    'gmv_table1': (108, r'^(cifar10_if1_a0.5_classes_per_client2_fedavg_etf_gmv|cifar100_if1_a0.5_classes_per_client20_fedaws)_s0$',
                   r'_classes_per_client5_.*_s0$', 'rounds=1,clients=10,local_epochs=1,max_per_class=5'),
    'gmv_table2': (90, r'^cifar10_if1_a0.5_classes_per_client5_scaffold\+etf_s0$', r'_classes_per_client5_.*_s0$',
                   'rounds=1,clients=10,local_epochs=1,max_per_class=5'),
    'ecl_table1': (252, r'^cifar10_if100_a0.2_ecl_3experts_s0$', r'^cifar10_if100_a0.2_.*_s0$', 'rounds=1,clients=6,frac=0.5,local_epochs=1'),
    'fedetf_appendix_cifar10': (72, r'^cifar10_if1_a0.05_fedetf_s7$', r'^cifar10_if1_a0.1_.*_s7$', 'rounds=1,clients=6,local_epochs=1,max_per_class=5'),
}

def write_cifar(root: Path, per_class=(20, 10), test_per_class=(2, 1), seed: int = 0):
    "CIFAR-10 and CIFAR-100 in torchvision's python-pickle layout: `per_class` / `test_per_class` images of every class (CIFAR-10's, CIFAR-100's)."
    rng = np.random.default_rng(seed)
    def draw(C, n):
        y = np.repeat(np.arange(C), n); rng.shuffle(y)
        x = np.clip(rng.normal(np.linspace(40, 215, C)[y][:, None], 40, (len(y), 3072)), 0, 255).astype(np.uint8)
        return x, y.tolist()
    d = root / 'cifar-10-batches-py'; d.mkdir(parents=True)
    x, y = draw(10, per_class[0])
    for i, (xs, ys) in enumerate(zip(np.array_split(x, 5), np.array_split(np.array(y), 5)), 1):
        pickle.dump({'batch_label': f'training batch {i} of 5', 'labels': ys.tolist(), 'data': xs,
                     'filenames': [f'{i}_{j}.png' for j in range(len(ys))]}, open(d / f'data_batch_{i}', 'wb'))
    x, y = draw(10, test_per_class[0])
    pickle.dump({'batch_label': 'testing batch 1 of 1', 'labels': y, 'data': x, 'filenames': [f't{j}.png' for j in range(len(y))]},
                open(d / 'test_batch', 'wb'))
    pickle.dump({'label_names': ['airplane', 'automobile', 'bird', 'cat', 'deer', 'dog', 'frog', 'horse', 'ship', 'truck'],
                 'num_cases_per_batch': 10000, 'num_vis': 3072}, open(d / 'batches.meta', 'wb'))
    d = root / 'cifar-100-python'; d.mkdir(parents=True)
    for split, n in (('train', per_class[1]), ('test', test_per_class[1])):
        x, y = draw(100, n)
        pickle.dump({'filenames': [f'{split}{j}.png' for j in range(len(y))], 'batch_label': split, 'fine_labels': y,
                     'coarse_labels': [c // 5 for c in y], 'data': x}, open(d / split, 'wb'))
    pickle.dump({'fine_label_names': [f'class{c}' for c in range(100)], 'coarse_label_names': [f'super{c}' for c in range(20)]},
                open(d / 'meta', 'wb'))

def write_image_lt(root: Path, counts, test_per_class: int, seed: int = 0):
    "ImageNet-LT's file lists beside tiny PNGs and iNaturalist-160k's image folders, `counts` training images per class."
    from PIL import Image
    rng = np.random.default_rng(seed)
    def png(p: Path, c: int):
        p.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.clip(rng.normal(40 + 30 * c, 30, (10, 12, 3)), 0, 255).astype(np.uint8)).save(p)
    d, lines = root / 'ImageNet_LT', {'train': [], 'test': []}
    for c, n in enumerate(counts):
        for split, m in (('train', n), ('test', test_per_class)):
            for i in range(m):
                rel = f"{'train' if split == 'train' else 'val'}/n{c:08d}/n{c:08d}_{i}.png"
                png(d / rel, c); lines[split].append(f'{rel} {c}')
    for split, ls in lines.items(): (d / f'ImageNet_LT_{split}.txt').write_text('\n'.join(ls) + '\n')
    for c, n in enumerate(counts):
        for split, m in (('train', n), ('test', test_per_class)):
            for i in range(m): png(root / 'iNaturalist_User_160k' / split / f'species{c:04d}' / f'{i}.png', c)

@pytest.fixture(scope='module')
def paper_data(tmp_path_factory):
    "The data root of this module: the synthetic datasets, $FEDLOGE_DATA pointing at it, torchvision's md5 checks of CIFAR off."
    import torchvision.datasets.cifar as tvc
    from fedloge_nb.fedloge import sse_c_cache_dir
    root = tmp_path_factory.mktemp('paper_data')
    write_cifar(root)
    write_image_lt(root, counts=[12, 8, 6, 4, 3, 2], test_per_class=2)
    with pytest.MonkeyPatch.context() as mp:
        if sse_c_cache_dir() is not None: mp.setenv('FEDLOGE_NB_SSE_C_CACHE', str(sse_c_cache_dir()))   # the usual SSE-C cache, not the temporary root's
        mp.setenv('FEDLOGE_DATA', str(root))
        mp.setattr(tvc.CIFAR10, '_check_integrity', lambda self: True)   # the real archives' md5 sums; these files are ours
        mp.setattr(tvc, 'check_integrity', lambda *a, **k: True)
        yield root

def test_every_paper_file_is_checked():
    assert sorted(p.stem for p in PAPERS.glob('*.toml')) == sorted(FILES)

@pytest.mark.parametrize('name', sorted(FILES))
def test_paper_file(name, paper_data, main_in_process, tmp_path):
    n_cells, only, only_all, override = FILES[name]
    f, out = PAPERS / f'{name}.toml', tmp_path / 'o'
    code, so, se = main_in_process('sweep', f, '--dry_run', '--out', out)          # the full grid: named, checked, costed
    assert code == 0 and so.count('todo') == n_cells and f'cost of {n_cells} cells to run' in so and '  GPU: ' in so, so[-2000:] + se
    code, so, se = main_in_process('sweep', f, '--out', out, '--only', only_all if ALL else only, '--override', override,
                                   '--device', 'cpu', '--progress', 'false', '--plots', 'false')
    assert code == 0, se
    spec, rows = load_spec(f), read_rows(out / 'results.csv')
    ran = [r for r in rows if r['status'] != 'pending']
    bad = [(r['cell'], r.get('error')) for r in ran if r['status'] != 'ok']
    if ALL:                                                   # every method on 1-2 rounds of noise: a run's numbers may blow up
        print('diverged (recorded by the engine, not a crash):', [b for b in bad if 'DivergenceError' in str(b[1])])
        bad = [b for b in bad if 'DivergenceError' not in str(b[1])]
    assert ran and not bad, bad
    file_cells = {c.name: c for c in expand(spec)}
    for r in (r for r in ran if r['status'] == 'ok'):         # the file's model, dataset and partition; a number out
        cfg = file_cells[r['cell']].cfg
        assert (r['model'], r['dataset'].split('@')[0]) == (cfg.model, cfg.dataset.split('@')[0])
        assert r['rounds'] <= 2 and (r.get('gm_acc') is not None or r.get('pm_acc') is not None), r

def test_readme_cost_table_is_rendered():
    "The cost table of experiments/papers/README.md is what the committed throughput CSVs give (`bench_throughput.py --readme`)."
    from fedloge_nb.sweep import cost_markdown
    text = (PAPERS / 'README.md').read_text()
    block = text.split('<!-- cost:begin (scripts/bench_throughput.py --readme) -->')[1].split('<!-- cost:end -->')[0]
    assert block.strip() == cost_markdown(sorted(PAPERS.glob('*.toml')), PAPERS.parents[1] / 'results' / 'throughput').strip()

def test_bench_throughput_script(tmp_path):
    "scripts/bench_throughput.py measures a setting, writes its CSV and prints the command, device, torch and each file's seconds per round."
    import subprocess, sys, csv
    root = PAPERS.parents[1]
    r = subprocess.run([sys.executable, str(root / 'scripts' / 'bench_throughput.py'), '--models', 'cnn', 'fedetf_cnn', '--batches', '1',
                        '--warmup', '0', '--out', str(tmp_path)], capture_output=True, text=True, timeout=300,
                       env={**os.environ, 'PYTHONPATH': str(root), 'OMP_NUM_THREADS': '1'})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    rows = list(csv.DictReader((tmp_path / 'cpu.csv').open()))
    assert [(x['model'], x['input'], x['batch']) for x in rows] == [('fedetf_cnn', '3x32x32', '128'), ('cnn', '3x32x32', '64')], rows
    assert all(float(x['images_per_s']) > 0 and x['threads'] == '1' and x['command'].startswith('python scripts/bench_throughput.py') for x in rows)
    assert '# python scripts/bench_throughput.py --models cnn' in r.stdout and 'torch ' in r.stdout, r.stdout
    assert 'fedetf_appendix_cifar10        fedetf_cnn' in r.stdout and 'fedloge_table1                 resnet18' in r.stdout, r.stdout
