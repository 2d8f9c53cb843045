"""Images per second of local training per model at each paper file's input size and batch size, and each file's seconds per round.

One measurement is the engine's own local training, `local_sgd` (forward, cross-entropy, backward, SGD step with the
run's momentum, the dataset's augmentation: CIFAR's crop + flip, ImageNet-LT's flip), of the engine's network (backbone +
biased head over the dataset's classes) on random images of the setting's shape: `--warmup` steps untimed, then
`--batches` steps timed (CUDA synchronised before and after). The settings are every (model, input, batch) a cell of
experiments/papers/*.toml trains with, plus the listed models no file uses at 3x32x32, batch 64. On the CPU torch runs
one thread (`--threads`), the configuration of the project's sweeps (one worker per core).

It writes results/throughput/<cpu|gpu>.csv atomically (`--device cuda` writes gpu.csv), prints the table with the
command, date, device and torch version, then each paper file's seconds per round derived from it (images per round /
images per second, training only: `fedloge_nb.sweep.images_per_round`) and the hours of the whole file, the numbers
`fedloge_nb sweep FILE --dry_run` prints. `--readme` rewrites the cost table of experiments/papers/README.md from the CSVs.

Usage: python scripts/bench_throughput.py [--device cpu|cuda] [--batches 5] [--warmup 2] [--threads 1] [--models ...] [--readme | --readme_only]
"""
import argparse, datetime, os, platform, re, sys, time
from pathlib import Path
import torch
import torch.nn.functional as F
from fedloge_nb.datasets import dataset_info
from fedloge_nb.federated import FedConfig, ClientData, local_sgd
from fedloge_nb.guards import check_device, save_csv
from fedloge_nb.models import make_net
from fedloge_nb.sweep import input_label, images_per_round, read_throughput, cell_seconds, cost_markdown
from fedloge_nb.sweep_file import load_spec, expand

ROOT = Path(__file__).resolve().parents[1]
LISTED = ('cnn', 'resnet8', 'resnet20', 'resnet32', 'resnet18', 'resnet34', 'resnet50', 'vgg11')
BEGIN, END = '<!-- cost:begin (scripts/bench_throughput.py --readme) -->', '<!-- cost:end -->'

def settings(papers: Path, models=None) -> list:
    "Every (model, dataset, batch) a paper file trains with, then the listed models no file uses at CIFAR size, batch 64."
    seen = {}
    for f in sorted(papers.glob('*.toml')):
        for c in expand(load_spec(f)):
            seen.setdefault((c.cfg.model, input_label(c.cfg), int(c.cfg.batch_size)), c.cfg.dataset)
    for m in LISTED:
        if not any(k[0] == m for k in seen): seen[(m, '3x32x32', 64)] = 'cifar10'
    return [(m, ds, b) for (m, _, b), ds in seen.items() if models is None or m in models]

def cpu_name() -> str:
    "The CPU's model name (/proc/cpuinfo), else platform's."
    try:
        m = re.search(r'^model name\s*:\s*(.+)$', Path('/proc/cpuinfo').read_text(), re.M)
        if m: return m.group(1).strip()
    except OSError: pass
    return platform.processor() or platform.machine()

def measure(model: str, dataset: str, batch: int, device: str, batches: int, warmup: int) -> dict:
    "Images per second of `batches` timed steps of the engine's local training (after `warmup` untimed ones)."
    info = dataset_info(dataset)
    torch.manual_seed(0)
    net = make_net(model, info.num_classes, info.in_channels, info.img_size, bias=True).to(device)
    cfg = FedConfig(dataset=dataset, model=model, batch_size=batch, local_epochs=1, lr=0.01, momentum=0.5)
    def data(n):
        x = torch.randn(n * batch, info.in_channels, info.img_size, info.img_size, device=device)
        y = torch.randint(0, info.num_classes, (n * batch,), device=device)
        return ClientData(0, x, y, x[:0], y[:0], torch.bincount(y.cpu(), minlength=info.num_classes), info.augment)
    loss = lambda m, xb, yb: F.cross_entropy(m(xb), yb)
    sync = (lambda: torch.cuda.synchronize(device)) if torch.device(device).type == 'cuda' else (lambda: None)
    if warmup: local_sgd(net, data(warmup), cfg, seed=0, loss_fn=loss); sync()
    d = data(batches); sync(); t0 = time.perf_counter()
    local_sgd(net, d, cfg, seed=1, loss_fn=loss); sync()
    dt = time.perf_counter() - t0
    return dict(images_per_s=round(batches * batch / dt, 3), sec_per_step=round(dt / batches, 4), steps=batches, warmup=warmup,
                augment=info.augment or '', classes=info.num_classes)

def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--device', default='cpu', help='cpu, cuda, cuda:1, ... (cpu writes cpu.csv, a GPU gpu.csv)')
    p.add_argument('--batches', type=int, default=5, help='timed training steps per setting')
    p.add_argument('--warmup', type=int, default=2, help='untimed steps before them')
    p.add_argument('--threads', type=int, default=1, help='torch threads on the CPU')
    p.add_argument('--models', nargs='+', default=None, help='only these models (default: every setting)')
    p.add_argument('--papers', default=str(ROOT / 'experiments' / 'papers'))
    p.add_argument('--out', default=str(ROOT / 'results' / 'throughput'))
    p.add_argument('--readme', action='store_true', help="rewrite the cost table of the papers' README from the CSVs")
    p.add_argument('--readme_only', action='store_true', help="only rewrite that table from the CSVs there are (no measurement)")
    a = p.parse_args()
    papers = Path(a.papers)
    if a.readme_only: return write_readme(papers, Path(a.out))
    if a.batches < 1 or a.warmup < 0: p.error('--batches must be >= 1 and --warmup >= 0')
    device = check_device(a.device)
    gpu = torch.device(device).type != 'cpu'
    if not gpu: torch.set_num_threads(a.threads)
    name = torch.cuda.get_device_name(torch.device(device)) if torch.device(device).type == 'cuda' else cpu_name()
    threads = torch.get_num_threads() if not gpu else ''
    load = round(os.getloadavg()[0], 2)                          # other processes on this machine share its cores
    date = datetime.datetime.now().astimezone().strftime('%Y-%m-%d %H:%M %Z')
    command = ' '.join(['python', 'scripts/bench_throughput.py', *sys.argv[1:]])
    print(f"# {command}\n# {date}; device {device}: {name}; torch {torch.__version__}; "
          f"{f'{threads} thread(s); ' if not gpu else ''}{a.warmup} warm-up + {a.batches} timed steps per setting; "
          f"load average {load} on {os.cpu_count()} cores at the start")
    print(f"{'model':<11} {'input':<11} {'batch':>5} {'augment':<7} {'img/s':>9} {'s/step':>8}")
    rows = []
    for model, ds, batch in settings(papers, a.models):
        r = measure(model, ds, batch, device, a.batches, a.warmup)
        inp = input_label(FedConfig(dataset=ds))
        print(f"{model:<11} {inp:<11} {batch:>5} {r['augment'] or '-':<7} {r['images_per_s']:>9.1f} {r['sec_per_step']:>8.3f}", flush=True)
        rows.append(dict(model=model, input=inp, batch=batch, **r, device=device, device_name=name, threads=threads, load=load,
                         torch=torch.__version__, date=date, command=command))
    out = Path(a.out) / ('gpu.csv' if gpu else 'cpu.csv')
    if a.models and out.exists():                               # a partial run keeps the other settings' rows
        keep = {(r['model'], r['input'], int(r['batch'])) for r in rows}
        rows = [dict(r) for k, r in read_throughput(out).items() if k not in keep] + rows
    save_csv(out, rows)
    print(f"# wrote {out}")
    table = read_throughput(out)
    print(f"\n# seconds per round of each paper file on this device (training only: images per round / img/s)")
    print(f"{'file':<30} {'model':<11} {'input':<11} {'batch':>5} {'cells':>5} {'images/round':>12} {'s/round':>9} {'hours':>9}")
    for f in sorted(papers.glob('*.toml')):
        groups = {}
        for c in expand(load_spec(f)):
            groups.setdefault((c.cfg.model, input_label(c.cfg), int(c.cfg.batch_size)), []).append(c)
        for (m, inp, b), cells in groups.items():
            secs = [cell_seconds(c, table) for c in cells]
            if any(s is None for s in secs): print(f"{f.stem:<30} {m:<11} {inp:<11} {b:>5} {len(cells):>5}   not measured"); continue
            ipr = sum(images_per_round(c.cfg) for c in cells) / len(cells)
            spr = sum(s / c.cfg.rounds for s, c in zip(secs, cells)) / len(cells)
            print(f"{f.stem:<30} {m:<11} {inp:<11} {b:>5} {len(cells):>5} {ipr:>12,.0f} {spr:>9,.1f} {sum(secs) / 3600:>9,.0f}")
    if a.readme: write_readme(papers, Path(a.out))

def write_readme(papers: Path, folder: Path):
    "Fill the cost block of the papers' README with `cost_markdown` of their files from the CSVs in `folder`."
    readme = papers / 'README.md'
    text = readme.read_text()
    if BEGIN not in text or END not in text: sys.exit(f"{readme} has no {BEGIN} ... {END} block to fill")
    head, rest = text.split(BEGIN, 1); tail = rest.split(END, 1)[1]
    readme.write_text(f"{head}{BEGIN}\n{cost_markdown(sorted(papers.glob('*.toml')), folder)}\n{END}{tail}")
    print(f"# wrote the cost table of {readme}")

if __name__ == '__main__':
    main()
