"""``python -m tuner`` is ``python -m tuner.sweep`` (see its ``--help``)."""


from tuner.sweep import main

if __name__ == "__main__":
    from tuner.console import run

    run(main)
