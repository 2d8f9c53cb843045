"""Training throughput (images/s) of fedloge_nb backbones + a bias-free 10-class head on random tensors.

One SGD step = forward, cross-entropy, backward, optimizer step, batch 64 by default, torch.set_num_threads(2).
Usage: python scripts/bench_models.py [--models cnn resnet8 resnet20] [--batch 64] [--seconds 3] [--threads 2] [--plain]
"""
import argparse, time
import torch
import torch.nn.functional as F
from fedloge_nb.models import MODELS, make_net

SHAPES = {'cnn': (1, 28), 'mlp': (1, 28)}  # FMNIST; ResNets default to CIFAR 3x32x32

def bench(name, batch=64, seconds=3.0, warmup=3, in_channels=None, img_size=None, channels_last=True):
    "Return (img/s, steps timed) for training steps of `name` on random (batch, C, H, W) tensors."
    cin, s = SHAPES.get(name, (3, 32))
    cin, s = in_channels or cin, img_size or s
    torch.manual_seed(0)
    net = make_net(name, 10, cin, s, channels_last=channels_last).train()
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.5)
    x, y = torch.randn(batch, cin, s, s), torch.randint(0, 10, (batch,))
    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(net(x), y).backward()
        opt.step()
    for _ in range(warmup): step()
    n, t0 = 0, time.perf_counter()
    while True:
        step(); n += 1
        dt = time.perf_counter() - t0
        if dt >= seconds: break
    return n * batch / dt, n, (cin, s, s)

def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--models', nargs='+', default=['cnn', 'resnet8', 'resnet20'])
    p.add_argument('--batch', type=int, default=64)
    p.add_argument('--seconds', type=float, default=3.0)
    p.add_argument('--threads', type=int, default=2)
    p.add_argument('--plain', action='store_true', help='contiguous (NCHW) conv weights instead of channels_last')
    a = p.parse_args()
    bad = [m for m in a.models if m not in MODELS]
    if bad: p.error(f"unknown model(s) {bad}; known: {', '.join(MODELS)}")
    torch.set_num_threads(a.threads)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, batch {a.batch}, "
          f"{'plain NCHW' if a.plain else 'channels_last'} conv weights")
    print(f"{'model':<10} {'input':<12} {'img/s':>10} {'steps':>6}")
    for m in a.models:
        ips, n, shape = bench(m, a.batch, a.seconds, channels_last=not a.plain)
        print(f"{m:<10} {'x'.join(map(str, shape)):<12} {ips:>10.0f} {n:>6}")

if __name__ == '__main__':
    main()
