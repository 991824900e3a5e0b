"""``python -m ferry``: the ``ferry`` command."""

from ferry.cli import main

main()
