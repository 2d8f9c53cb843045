"""Unseen clients (`--new_clients`): held out of training, each personalised by its method's own `personalize_new` for
`post_epochs` epochs on the same trained model. The mechanism check: the personalisation changes the unseen clients'
accuracy (0 epochs vs 3 on the same trained model), and FedLoGe's phi_k trained then LA-FR beats its untrained phi_k;
a method without a personalised part serves its generic model."""
import dataclasses, json
import pytest
from fedloge_nb.federated import FedConfig, hold_out_clients
from fedloge_nb.engine import run_fl, evaluate_new_clients
from fedloge_nb.data import make_fed_data

BASE = dict(dataset='digits', imb_factor=10, alpha=0.5, clients=4, new_clients=2, post_epochs=3, model='mlp', frac=1.0,
            rounds=3, local_epochs=1, batch_size=16, lr=0.1, eval_every=3, device='cpu')
OWN = ['fedloge', 'fedrep', 'fedper', 'fedrod', 'ditto', 'fedbabu', 'fedavg_ft', 'lg_fedavg', 'fedetf', 'fednh', 'ecl', 'fedafa']

def trained(method, **kw):
    cfg = FedConfig(method=method, **{**BASE, **kw}, hp={'sse_steps': 100} if method == 'fedloge' else {})
    fed = make_fed_data(**cfg.data_args())
    return cfg, run_fl(cfg, fed, progress=False), hold_out_clients(fed, cfg.new_clients)[1]

@pytest.mark.parametrize('method', OWN)
def test_each_method_personalises_its_unseen_clients(method):
    cfg, res, fed_new = trained(method)
    s = res.summary
    assert s['new_clients_adapt'] == 'own' and s['pm_new_clients'] == 2 and len(s['new_client_acc']) == 2, s
    assert s['pm_clients'] == 4                                              # the held-out clients are not among PM's
    again = evaluate_new_clients(res.algo, fed_new, cfg)                      # the same numbers again (seeded per client)
    assert again['pm_new_acc'] == s['pm_new_acc']
    none = evaluate_new_clients(res.algo, fed_new, dataclasses.replace(cfg, post_epochs=0))
    assert none['new_client_acc'] != s['new_client_acc'], (method, none['new_client_acc'], s['new_client_acc'])

def test_fedloge_unseen_clients_gain_from_phi_and_la_fr():
    cfg, res, fed_new = trained('fedloge', rounds=5, post_epochs=5)
    none = evaluate_new_clients(res.algo, fed_new, dataclasses.replace(cfg, post_epochs=0))
    s = res.summary
    assert s['pm_new_acc'] == s['pm_new_acc_la_fr'] and s['pm_new_acc'] > none['pm_new_acc_phi'] + 10, (s['pm_new_acc'], none['pm_new_acc_phi'])

def test_a_generic_method_serves_its_generic_model():
    cfg, res, fed_new = trained('fedavg')
    assert res.summary['new_clients_adapt'] == 'generic'
    assert evaluate_new_clients(res.algo, fed_new, dataclasses.replace(cfg, post_epochs=0))['pm_new_acc'] == res.summary['pm_new_acc']

def test_new_clients_need_a_budget_and_the_right_split():
    with pytest.raises(ValueError, match='--post_epochs 5'): FedConfig(new_clients=2).validate()
    cfg = FedConfig(method='fedavg', **BASE)
    with pytest.raises(ValueError, match=r'cfg.clients=4 \+ new_clients=2'):
        run_fl(cfg, make_fed_data('digits', imb_factor=10, alpha=0.5, clients=4), progress=False)
