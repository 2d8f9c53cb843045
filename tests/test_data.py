"""Bad-input and file-system cases of fedloge_nb.datasets and fedloge_nb.data that need real files: caches, raw data, image folders.

The notebooks 02_partition, 02a_datasets and 02b_data test the protocol itself; these tests build throw-away data roots in tmp_path.
"""
import gzip, os, warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import fedloge_nb
from fedloge_nb import data as D, datasets as DS, partition as P

DEBIAN = Path('/usr/share/datasets/fashion-mnist')
needs_fmnist = pytest.mark.skipif(not (DEBIAN / 'train-images-idx3-ubyte.gz').is_file(),
                                  reason='Debian package dataset-fashion-mnist not installed')


def _no_tmp_left(root: Path):
    return not [p for p in root.rglob('*') if p.name.endswith('.tmp')]


def _rebuilds(fn):
    "Run fn, return (result, True if a 'rebuilding' warning was issued)."
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter('always')
        out = fn()
    return out, any('rebuilding' in str(w.message) for w in ws)


@pytest.fixture
def tiny_cached(monkeypatch):
    "Register a small cached dataset 'tiny' (synthetic images) to exercise the cache through load_dataset."
    calls = []
    def build(root, download=False):
        calls.append(1)
        return DS.build_synthetic(num_classes=3, n_train=20, n_test=4, img_size=4)
    monkeypatch.setitem(DS.DATASETS, 'tiny', DS.DatasetInfo(build, 3, 1, 4, None, True, 'test'))
    return calls


# ---------------------------------------------------------------- cache

def test_cache_roundtrip_and_corruption(tmp_path, tiny_cached):
    a, b = DS.load_dataset('tiny', root=tmp_path)
    assert (tmp_path / 'tiny.pt').is_file() and len(tiny_cached) == 1
    a2, _ = DS.load_dataset('tiny', root=tmp_path)
    assert len(tiny_cached) == 1 and torch.equal(a.x, a2.x)
    p = tmp_path / 'tiny.pt'
    damages = {
        'garbage': lambda: p.write_bytes(b'not a torch file'),
        'truncated': lambda: p.write_bytes(p.read_bytes()[:200]),
        'empty': lambda: p.write_bytes(b''),
        'wrong name': lambda: torch.save({**torch.load(p, weights_only=True), 'name': 'other'}, p),
        'edited tensor': lambda: torch.save({**torch.load(p, weights_only=True), 'y_test': torch.zeros(12, dtype=torch.long)}, p),
        'missing key': lambda: torch.save({k: v for k, v in torch.load(p, weights_only=True).items() if k != 'check'}, p),
    }
    for i, (name, damage) in enumerate(damages.items()):
        damage()
        (a3, b3), rebuilt = _rebuilds(lambda: DS.load_dataset('tiny', root=tmp_path))
        assert rebuilt, name
        assert len(tiny_cached) == i + 2, name
        assert torch.equal(a3.x, a.x) and torch.equal(b3.y, b.y), name
        (a4, _), rebuilt = _rebuilds(lambda: DS.load_dataset('tiny', root=tmp_path))   # the rebuilt cache is valid
        assert not rebuilt and len(tiny_cached) == i + 2, name
    assert _no_tmp_left(tmp_path)


def test_refresh_rebuilds(tmp_path, tiny_cached):
    DS.load_dataset('tiny', root=tmp_path)
    DS.load_dataset('tiny', root=tmp_path, refresh=True)
    assert len(tiny_cached) == 2


def test_failed_cache_write_leaves_nothing(tmp_path, tiny_cached, monkeypatch):
    def broken_save(obj, f):
        f.write(b'half a tensor')
        raise OSError('No space left on device')
    monkeypatch.setattr(torch, 'save', broken_save)
    with pytest.warns(UserWarning, match='could not write the dataset cache'):
        a, _ = DS.load_dataset('tiny', root=tmp_path)
    assert len(a) == 60
    assert not (tmp_path / 'tiny.pt').exists() and _no_tmp_left(tmp_path)


def test_interrupted_write_keeps_old_file(tmp_path):
    p = DS.atomic_write(tmp_path / 'f.bin', lambda f: f.write(b'old'))
    def interrupted(f):
        f.write(b'new but incomplete')
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        DS.atomic_write(p, interrupted)
    assert p.read_bytes() == b'old' and _no_tmp_left(tmp_path)


# ---------------------------------------------------------------- Fashion-MNIST

@needs_fmnist
def test_fmnist_offline_build_cache_and_corruption(tmp_path, monkeypatch):
    monkeypatch.setenv('FEDLOGE_FMNIST_DIR', str(DEBIAN))
    tr, te = DS.load_dataset('fmnist', root=tmp_path)
    assert tr.x.shape == (60000, 1, 28, 28) and te.x.shape == (10000, 1, 28, 28)
    assert tr.x.dtype == torch.float32 and tr.y.dtype == torch.int64
    assert torch.bincount(tr.y).tolist() == [6000] * 10 and torch.bincount(te.y).tolist() == [1000] * 10
    assert abs(tr.mean[0] - 0.2860) < 1e-4 and abs(tr.std[0] - 0.3530) < 1e-4
    assert abs(tr.x.mean().item()) < 1e-4
    raw = tmp_path / 'FashionMNIST' / 'raw'
    assert sorted(p.name for p in raw.iterdir()) == sorted(DS.FMNIST_FILES)        # decompressed, no .gz
    cache = tmp_path / 'fmnist.pt'
    assert cache.is_file()
    # a truncated cache (e.g. a crash of some other writer) is detected and rebuilt; the raw file it is rebuilt
    # from is corrupted too, so it is re-extracted from the Debian files on the way
    cache.write_bytes(cache.read_bytes()[:4096])
    (raw / 'train-images-idx3-ubyte').write_bytes(b'\x00' * 100)
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter('always')
        tr2, te2 = DS.load_dataset('fmnist', root=tmp_path)
    msgs = ' | '.join(str(w.message) for w in ws)
    assert 'rebuilding' in msgs and 're-extracting' in msgs, msgs
    assert torch.equal(tr2.x, tr.x) and torch.equal(te2.y, te.y)
    assert (raw / 'train-images-idx3-ubyte').stat().st_size == 47040016
    (tr3, _), rebuilt = _rebuilds(lambda: DS.load_dataset('fmnist', root=tmp_path))   # the new cache is good
    assert not rebuilt and torch.equal(tr3.x, tr.x)
    assert _no_tmp_left(tmp_path)


@needs_fmnist
def test_fmnist_small_fed_protocol():
    kw = dict(imb_factor=10, alpha=0.3, clients=6, max_per_class=120, test_max_per_class=30, seed=3)   # default root
    fed = D.make_fed_data('fmnist', **kw)
    assert fed.class_counts.tolist() == P.long_tail_counts(120, 10, 10)
    assert len(fed.y_test) == 300 and torch.bincount(fed.y_test).tolist() == [30] * 10
    assert torch.equal(torch.cat(fed.train_idx).sort().values, torch.arange(len(fed.y_train)))
    assert P.proportional_within_rounding(fed.client_counts, fed.local_test_counts).all()
    again = D.make_fed_data('fmnist', **kw)
    assert torch.equal(again.x_train, fed.x_train) and torch.equal(again.x_test, fed.x_test)
    assert all(torch.equal(a, b) for a, b in zip(again.train_idx + again.test_idx, fed.train_idx + fed.test_idx))
    assert fed.config['root'] is None and fed.config['max_per_class'] == 120


def test_fmnist_missing_offline(tmp_path, monkeypatch):
    empty = tmp_path / 'no-debian'
    empty.mkdir()
    monkeypatch.setenv('FEDLOGE_FMNIST_DIR', str(empty))
    root = tmp_path / 'root'
    with pytest.raises(DS.DataMissingError) as e:
        DS.load_dataset('fmnist', root=root)
    msg = str(e.value)
    assert 'apt-get install dataset-fashion-mnist' in msg and 'download=True' in msg
    assert str(root / 'FashionMNIST' / 'raw') in msg and 'FEDLOGE_FMNIST_DIR' in msg
    assert isinstance(e.value, ValueError) and isinstance(e.value, FileNotFoundError)
    assert not (root / 'fmnist.pt').exists()                                       # nothing cached
    with pytest.raises(ValueError, match='apt-get install'):                       # also through make_fed_data
        D.make_fed_data('fmnist', root=root)


def test_fmnist_partial_debian_files(tmp_path, monkeypatch):
    src = tmp_path / 'src'
    src.mkdir()
    (src / 'train-images-idx3-ubyte.gz').write_bytes(gzip.compress(b'x'))         # 1 of 4 files only
    monkeypatch.setenv('FEDLOGE_FMNIST_DIR', str(src))
    with pytest.raises(DS.DataMissingError, match='lacks'):
        DS.load_dataset('fmnist', root=tmp_path / 'root')


# ---------------------------------------------------------------- CIFAR

@pytest.mark.parametrize('name,folder', [('cifar10', 'cifar-10-batches-py'), ('cifar100', 'cifar-100-python')])
def test_cifar_missing_offline(tmp_path, name, folder):
    with pytest.raises(DS.DataMissingError) as e:
        DS.load_dataset(name, root=tmp_path)
    msg = str(e.value)
    assert str(tmp_path / folder) in msg and 'download=True' in msg
    assert not list(tmp_path.iterdir())                                            # nothing written


def test_cifar_corrupt_folder(tmp_path):
    (tmp_path / 'cifar-10-batches-py').mkdir()
    with pytest.raises(DS.DataMissingError, match='could not be loaded'):
        DS.load_dataset('cifar10', root=tmp_path)


# ---------------------------------------------------------------- root resolution, names

def test_default_root_independent_of_cwd(tmp_path, monkeypatch):
    monkeypatch.delenv('FEDLOGE_DATA', raising=False)
    monkeypatch.chdir(tmp_path)
    repo_data = Path(fedloge_nb.__file__).resolve().parents[1] / 'data'
    assert repo_data.is_dir()
    assert DS.data_root() == repo_data
    monkeypatch.setenv('FEDLOGE_DATA', str(tmp_path / 'elsewhere'))
    assert DS.data_root() == tmp_path / 'elsewhere'
    assert DS.cache_path('fmnist') == tmp_path / 'elsewhere' / 'fmnist.pt'
    assert DS.data_root('x') == Path('x')


def test_unknown_dataset_lists_known():
    with pytest.raises(ValueError) as e:
        DS.load_dataset('tiny-imagenet')
    for name in ('fmnist', 'cifar10', 'cifar100', 'digits', 'synthetic', 'folder', 'imagenetlt', 'inat160k'):
        assert name in str(e.value)


# ---------------------------------------------------------------- image folders / file lists

def _make_folder(root: Path, val_name='val', sizes=(5, 3, 2), size=(9, 7)):
    rng = np.random.default_rng(0)
    from PIL import Image
    lists = {}
    for split, n_per in (('train', sizes), (val_name, (2, 2, 2))):
        lines = []
        for c, (name, n) in enumerate(zip(('ant', 'bee', 'cow'), n_per)):
            (root / split / name).mkdir(parents=True)
            for i in range(n):
                f = root / split / name / f'{i:03d}.jpg'
                Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8)).save(f, quality=95)
                lines.append(f'{f} {c}')                                           # absolute paths
        lists[split] = lines
    return lists


def test_image_folder_and_file_lists(tmp_path):
    lists = _make_folder(tmp_path)
    tr, te = DS.load_dataset('folder', root=tmp_path, img_size=6)
    assert tr.x.shape == (10, 3, 6, 6) and te.x.shape == (6, 3, 6, 6)
    assert tr.classes == ['ant', 'bee', 'cow'] and tr.y.tolist() == [0] * 5 + [1] * 3 + [2] * 2
    assert torch.allclose(tr.x.mean((0, 2, 3)), torch.zeros(3), atol=1e-5)
    (tmp_path / 'ImageNet_LT_train.txt').write_text('\n'.join(lists['train']))
    (tmp_path / 'ImageNet_LT_test.txt').write_text('\n'.join(lists['val']))
    ltr, lte = DS.load_dataset('folder', root=tmp_path, img_size=6, train='ImageNet_LT_train.txt', test='ImageNet_LT_test.txt')
    assert torch.equal(ltr.x, tr.x) and torch.equal(lte.y, te.y)
    g, _ = DS.load_dataset('folder', root=tmp_path, img_size=5, channels=1)
    assert g.x.shape == (10, 1, 5, 5)
    fed = D.make_fed_data('folder', root=tmp_path, imb_factor=1, clients=2, partition='iid', dataset_kwargs=dict(img_size=6))
    assert fed.num_classes == 3 and fed.in_channels == 3 and fed.img_size == 6 and fed.clients == 2
    assert torch.equal(torch.cat(fed.train_idx).sort().values, torch.arange(len(fed.y_train)))
    assert fed.config['dataset_kwargs'] == {'img_size': 6}


def test_folder_bad_inputs(tmp_path):
    lists = _make_folder(tmp_path, val_name='test')
    with pytest.raises(DS.DataMissingError, match='does not exist'):
        DS.load_folder(tmp_path / 'absent')
    (tmp_path / 'test' / 'dog').mkdir()                                            # a test class unknown to train
    with pytest.raises(ValueError, match='training folder lacks'):
        DS.load_folder(tmp_path)
    (tmp_path / 'test' / 'dog').rmdir()
    (tmp_path / 'l_train.txt').write_text('\n'.join(lists['train'] + [str(tmp_path / 'gone.jpg') + ' 1']))
    (tmp_path / 'l_test.txt').write_text('\n'.join(lists['test']))
    with pytest.raises(DS.DataMissingError, match='gone.jpg'):
        DS.load_folder(tmp_path, train='l_train.txt', test='l_test.txt')
    (tmp_path / 'l_bad.txt').write_text('a.jpg -3\n')
    with pytest.raises(ValueError, match=r'l_bad.txt:1'):
        DS.load_folder(tmp_path, train='l_bad.txt', test='l_test.txt')
    (tmp_path / 'broken.jpg').write_bytes(b'not an image')
    (tmp_path / 'l_broken.txt').write_text(f'{tmp_path / "broken.jpg"} 0\n')
    with pytest.raises(ValueError, match='cannot read image'):
        DS.load_folder(tmp_path, train='l_broken.txt', test='l_test.txt')
    with pytest.raises(ValueError, match='mixing'):
        DS.load_folder(tmp_path, train='train', test='l_test.txt')
    with pytest.raises(ValueError, match='channels must be 1'):
        DS.load_folder(tmp_path, channels=2)
    empty = tmp_path / 'empty'
    (empty / 'train').mkdir(parents=True)
    with pytest.raises(DS.DataMissingError, match='root/train/<class>/<image>'):
        DS.load_folder(empty)
