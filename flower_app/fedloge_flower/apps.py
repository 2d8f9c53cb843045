"The Flower components of fedloge_nb: built from the package's Algorithm hooks (fedloge_nb.flower), nothing method-specific here."
from fedloge_nb.flower import make_server_app
from fedloge_nb.flower_client import make_client_app

server_app = make_server_app()
client_app = make_client_app()
