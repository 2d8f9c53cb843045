"The quickstart's ClientApp: train and evaluate handlers."
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from stock_app.task import Net, load_data, settings, train as train_fn, test as test_fn

app = ClientApp()


@app.train()
def train(msg: Message, context: Context):
    "Train the received model on this node's partition."
    rc = settings(context)
    model = Net(rc); model.load_state_dict(msg.content['arrays'].to_torch_state_dict())
    d = load_data(rc['data'], int(context.node_config['partition-id']))
    loss = train_fn(model, d['x'], d['y'], int(rc['local-epochs']), float(rc['lr']), float(rc['momentum']), int(rc['batch-size']))
    content = RecordDict({'arrays': ArrayRecord(model.state_dict()), 'metrics': MetricRecord({'train_loss': loss, 'num-examples': len(d['y'])})})
    return Message(content=content, reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context):
    "Evaluate the received model on this node's test set."
    rc = settings(context)
    model = Net(rc); model.load_state_dict(msg.content['arrays'].to_torch_state_dict())
    d = load_data(rc['data'], int(context.node_config['partition-id']))
    loss, acc = test_fn(model, d['x_test'], d['y_test'])
    return Message(content=RecordDict({'metrics': MetricRecord({'eval_loss': loss, 'eval_acc': acc, 'num-examples': len(d['y_test'])})}), reply_to=msg)
