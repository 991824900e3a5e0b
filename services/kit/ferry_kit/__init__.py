"""Ferry's kit: what develops and demonstrates Ferry (the local stack, ``ferry up``, the demo, the
test rigs). It imports :mod:`ferry`; the product never imports it."""
