"""``ferry up`` / ``down`` / ``ps``: every service as processes supervised by supervisord.

:mod:`~ferry_kit.supervise.programs` (which processes, the generated configuration),
:mod:`~ferry_kit.supervise.rpc` (supervisord's XML-RPC on a unix socket),
:mod:`~ferry_kit.supervise.health` (what healthy means per service),
:mod:`~ferry_kit.supervise.control` (up, wait, ps, down) and :mod:`~ferry_kit.supervise.cli`.
"""
