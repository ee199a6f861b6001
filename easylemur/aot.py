"""`python -m easylemur.aot --config CFG (--accelerator NAME | --topology NAME)`: hands over to
easylemur.train.aot, which compiles the run's train step for a TPU pod on this machine."""

if __name__ == "__main__":
    import sys

    from easylemur.errors import run_cli
    from easylemur.train.aot import main

    sys.exit(run_cli(main))
