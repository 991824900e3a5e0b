"""Dataset definitions (YAML files in ``datasets/``, :mod:`ferry.datasets.spec`) and the cheap,
pure-Python checks on a file's first bytes (:mod:`ferry.datasets.precheck`)."""
