"""Vertex AI ``google.cloud.aiplatform.v1.JobService`` (CustomJob methods) on the shared core.

:mod:`.validation` checks CreateCustomJob, :mod:`.state` holds the jobs' life cycle
(:class:`~.state.VertexState`), :mod:`.service` is the gRPC servicer. This module stays light
(names only), so fault rules can be parsed without loading the Vertex types.
"""

JOB_SERVICE = "google.cloud.aiplatform.v1.JobService"
METHODS = ("CreateCustomJob", "GetCustomJob", "ListCustomJobs", "CancelCustomJob", "DeleteCustomJob")
