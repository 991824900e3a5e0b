"""The kit's own error: a server of the local stack failed.

The product (``ferry``) never names it. It is a :class:`~ferry.errors.ConfigError` because it
means what a ConfigError means to the product: this process cannot go on, and retrying a file or
quarantining it would not help. So the stage runtime, which stops on a ConfigError, also stops on
a StackError raised by kit code it calls (a rig, a fault proxy), without knowing the kit; and
``ferry``'s entry point prints its one-line message like any other
:class:`~ferry.errors.FerryError`.
"""

from __future__ import annotations

from ferry.errors import ConfigError


class StackError(ConfigError):
    """A local-stack component failed to start, stop or pass its health check."""

    reason = "stack"
