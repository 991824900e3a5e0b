"""The transfer service: ``FileTransformed`` → copy B staging → A incoming → ``FileTransferred``.

The fragile cross-cluster step, isolated in its own consumer group (``<prefix>.transfer``): every
WebHDFS call has connect/read timeouts, every retry a ceiling, and a file that cannot pass goes to
``ferry.failed`` while the others keep flowing.
"""

from __future__ import annotations

from ferry.clusters.hdfs.webhdfs import WebHdfs
from ferry.core.events import FileTransformed
from ferry.core.runtime.runner import StageRunner, build_runner
from ferry.core.runtime.service import service_main
from ferry.core.runtime.stage import Stage, in_parallel
from ferry.lineage.observer import lineage_observer
from ferry.settings import Settings, get_settings
from ferry.stages.transfer.handlers import TransferDeps, transfer_file


def build(settings: Settings | None = None) -> StageRunner:
    """Wire the transfer stage: HDFS ports for B and A (by name), topics, consumer, producer."""
    settings = settings or get_settings()
    # Ride out an outage of cluster A (TransferSettings): retry a file for at least
    # outage_window_s, with short backoffs so the stage resumes soon after A is back.
    settings = settings.model_copy(
        update={
            "retry": settings.retry.model_copy(
                update={
                    "min_window_s": settings.transfer.outage_window_s,
                    "max_backoff_s": settings.transfer.max_backoff_s,
                }
            )
        }
    )
    deps = TransferDeps(
        hdfs_b=WebHdfs.for_cluster("b", settings),
        hdfs_a=WebHdfs.for_cluster("a", settings),
        incoming_path=settings.paths.incoming_path,
        fs_url_a=settings.cluster("a").fs_url,
        # copy_between retries a part itself; the runner's policy then retries the whole file.
        # The outage window belongs to the runner's retries of the whole file, not to each part.
        retry=settings.retry.model_copy(update={"max_attempts": 2, "min_window_s": 0.0}),
    )
    # files copied transfer.parallel_files at a time: a small file's copy waits on the clusters
    tr = settings.transfer
    if tr.parallel_files > 1 and tr.batch_size > 1:
        handler = in_parallel(transfer_file, tr.parallel_files)
        stage = Stage(
            "transfer",
            {FileTransformed: handler},
            batch_size=tr.batch_size,
            batch_wait_s=tr.batch_wait_s,
        )
    else:
        stage = Stage("transfer", {FileTransformed: transfer_file})
    return build_runner(stage, deps, settings, observer=lineage_observer(settings, stage.name))


#: ``ferry run transfer`` (:func:`ferry.core.services.run`).
main = service_main(build)
