"""``python -m ferry.tracker``: run the tracker (see :mod:`ferry.tracker.app`)."""

from ferry.tracker.app import main

main()
