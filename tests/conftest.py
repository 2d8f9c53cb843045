import pytest

@pytest.fixture
def main_in_process(capsys):
    "Call the console script's dispatcher in this process (no interpreter start-up): args -> (exit code, stdout, stderr)."
    from fedloge_nb.cli import main
    def call(*args):
        code = 0
        try: main([*map(str, args)])
        except SystemExit as e: code = e.code
        o = capsys.readouterr()
        return code, o.out, o.err
    return call
