"""Deploy a fedloge_nb run on Flower on this machine: `fedloge_nb deploy` (fedloge_nb.flower_deploy.deploy) from a script.

One SuperLink and one SuperNode per client as separate processes on 127.0.0.1 (TLS with a throw-away CA and
authenticated SuperNodes unless --insecure), the job submitted with `flwr run`, the usual run files in --out, and
every process it started stopped at the end, also when the job fails or the script is interrupted.

    python scripts/flower_deploy.py --method fedloge --clients 3 --rounds 3 --out runs/flower_deploy

Every `fedloge_nb run` flag works (--hp 'k=v,k=v', --resume true, ...), plus --port, --timeout, --job_timeout,
--min_clients, --insecure, --keep_logs. Exit code 0: OUT/summary.json written; 1: the job failed (one line);
2: a bad flag or output folder (one line)."""
import signal, sys


def main(argv=None):
    from fedloge_nb import flower_deploy  # noqa: F401  (registers the deploy command)
    from fedloge_nb.cli import main as cli_main
    def _term(*_): raise KeyboardInterrupt            # SIGTERM too: the deployment's finally stops every process
    signal.signal(signal.SIGTERM, _term)
    try: cli_main(['deploy', *(sys.argv[1:] if argv is None else argv)])
    except KeyboardInterrupt: sys.exit(130)


if __name__ == '__main__':
    main()
