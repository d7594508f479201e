"""Cloud Batch ``google.cloud.batch.v1.BatchService`` jobs and tasks on the shared core.

:mod:`.validation` checks CreateJob and maps Batch accelerator names to the shared GPU pools,
:mod:`.state` holds the jobs' life cycle (:class:`~.state.BatchState`), :mod:`.reads` the list
and task reads, :mod:`.service` the gRPC servicer. This module stays light (names only).
"""

BATCH_SERVICE = "google.cloud.batch.v1.BatchService"
METHODS = ("CreateJob", "GetJob", "ListJobs", "CancelJob", "DeleteJob", "ListTasks", "GetTask")
