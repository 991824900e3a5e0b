"""The ``supervise`` section: ``ferry up``'s supervisord (the local kit)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from ferry.settings.base import Frozen, WorkPath


class SuperviseSettings(Frozen):
    """``ferry up``: every service under supervisord. Env: ``FERRY_SUPERVISE__<FIELD>``.

    A service that exits after running ``start_secs`` is restarted at once; one that exits sooner
    is a failed start, retried after 1 s, 2 s, 3 s, … (supervisord's backoff grows by one second
    per attempt) until ``start_retries`` retries failed, then it stays FATAL (the crash-loop
    limit) and ``ferry up`` / ``ferry ps`` name it.
    """

    home: WorkPath = Field(
        default=Path("var"),
        description=(
            "Where supervisord keeps its files (default: ``<var_dir>``): conf/supervisord.conf, "
            "run/supervisord.sock, "
            "run/supervisord.pid, log/supervisord.log and one log/<process>.log per service."
        ),
    )
    start_secs: int = Field(
        default=10, ge=1, description="Seconds a service must stay up to count as started."
    )
    start_retries: int = Field(
        default=3, ge=0, description="Failed starts in a row retried before FATAL (crash loop)."
    )
    stop_margin_s: int = Field(
        default=15,
        ge=1,
        description=(
            "stopwaitsecs = kafka.shutdown_grace_s + this, s: after SIGTERM a service may finish "
            "its running record and leave its group before supervisord sends SIGKILL."
        ),
    )
    rpc_timeout_s: float = Field(
        default=10.0, description="Timeout of one XML-RPC call to supervisord, s."
    )
    health_timeout_s: float = Field(
        default=5.0, description="Timeout of one health probe (Kafka admin, HTTP), s."
    )
