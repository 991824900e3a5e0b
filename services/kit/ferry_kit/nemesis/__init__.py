"""A seeded nemesis for the local stack (issue 47): a fault schedule (:mod:`.schedule`) applied
and always undone (:mod:`.faults`) while files keep arriving (:mod:`.workload`), then the
exactly-once checker (:mod:`.checker`); :mod:`.runner` runs them, ``python -m ferry_kit.nemesis``
(``make nemesis``) is its command line."""
