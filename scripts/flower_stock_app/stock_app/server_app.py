"The quickstart's ServerApp: FedAvg for `num-server-rounds` rounds, with a central evaluation on the global test set each round."
import torch
from pathlib import Path
from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg
from stock_app.task import Net, mark, settings, test as test_fn

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    rc = settings(context)
    test = torch.load(Path(rc['data']) / 'test.pt', weights_only=True)
    n = int(rc['clients'])                                            # every client trains and evaluates each round

    def global_evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        model = Net(rc); model.load_state_dict(arrays.to_torch_state_dict())
        loss, acc = test_fn(model, test['x'], test['y'])
        mark(rc['trace'], f'round {server_round} evaluated')
        return MetricRecord({'accuracy': acc, 'loss': loss})

    strategy = FedAvg(fraction_train=1.0, fraction_evaluate=1.0, min_train_nodes=n, min_evaluate_nodes=n, min_available_nodes=n)
    strategy.start(grid=grid, initial_arrays=ArrayRecord(Net(rc).state_dict()), num_rounds=int(rc['num-server-rounds']),
                   train_config=ConfigRecord({'lr': float(rc['lr'])}), evaluate_fn=global_evaluate)
