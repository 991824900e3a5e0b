"""``ferry up`` / ``down`` / ``ps``: the five services as processes supervised by supervisord.

:mod:`~ferry.supervise.programs` (which processes, the generated configuration),
:mod:`~ferry.supervise.rpc` (supervisord's XML-RPC on a unix socket),
:mod:`~ferry.supervise.health` (what healthy means per service),
:mod:`~ferry.supervise.control` (up, wait, ps, down) and :mod:`~ferry.supervise.cli`.
"""
