"The quickstart's task.py: the model, the data of one partition, train and test."
import json, os, time
from pathlib import Path
import torch
from torch import nn


def settings(context) -> dict:
    "The run config (`flwr run`); `run_simulation` passes none, so there it comes from $STOCK_APP_CONFIG (JSON)."
    return {**json.loads(os.environ.get('STOCK_APP_CONFIG', '{}')), **dict(context.run_config)}


def Net(rc: dict):
    "The benchmark's model (the run config's `model`: fedloge_nb's CNN, say), the one the fedloge_nb runs train."
    from fedloge_nb.models import make_net
    return make_net(rc['model'], int(rc['num-classes']), int(rc['in-channels']), int(rc['img-size']))


def load_data(folder, partition_id: int):
    "Partition `partition_id`'s train and test tensors (x, y)."
    return torch.load(Path(folder) / f'client_{partition_id}.pt', weights_only=True)


def train(net, x, y, epochs: int, lr: float, momentum: float, batch_size: int) -> float:
    "Local SGD over (x, y) in shuffled mini-batches; the mean loss."
    opt, crit, total, n = torch.optim.SGD(net.parameters(), lr=lr, momentum=momentum), nn.CrossEntropyLoss(), 0.0, 0
    net.train()
    for _ in range(epochs):
        for idx in torch.randperm(len(y)).split(batch_size):
            opt.zero_grad(); loss = crit(net(x[idx]), y[idx]); loss.backward(); opt.step()
            total += float(loss) * len(idx); n += len(idx)
    return total / max(n, 1)


@torch.no_grad()
def test(net, x, y, batch_size: int = 512) -> tuple[float, float]:
    "(loss, accuracy) on (x, y)."
    net.eval(); crit, loss, correct = nn.CrossEntropyLoss(reduction='sum'), 0.0, 0
    for i in range(0, len(y), batch_size):
        out = net(x[i:i + batch_size]); loss += float(crit(out, y[i:i + batch_size])); correct += int((out.argmax(1) == y[i:i + batch_size]).sum())
    return loss / max(len(y), 1), correct / max(len(y), 1)


def mark(path, what: str):
    if path:
        with open(path, 'a') as f: f.write(f"{time.time():.3f}\t{what}\n")
