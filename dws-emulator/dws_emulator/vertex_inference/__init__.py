"""Vertex AI inference on the shared core: ``google.cloud.aiplatform.v1beta1`` BatchPredictionJobs
(``JobService``) and Endpoints with their model deployments (``EndpointService``).

The v1 ``JobService`` (CustomJobs, :mod:`..vertex`) is another gRPC service name, so both are
served side by side. :mod:`.validation` checks the requests, :mod:`.batch` holds the batch
prediction jobs' life cycle, :mod:`.endpoints` the endpoints and :mod:`.deployments` the
DeployModel requests (their records and the traffic-split rules: :mod:`.records`), :mod:`.lro`
their long-running operations, :mod:`.state` plugs them into the core
(:class:`~.state.VertexInferenceState`) and :mod:`.service` is the gRPC servicers. This module stays light (names only), so fault rules
can be parsed without loading the v1beta1 types.

The workload convention (:mod:`..core.workload`) for a batch prediction job: a job built from a
``model`` has no container environment, so its run time and exit code are read, variable by
variable, from ``unmanaged_container_model.container_spec.env`` (``DWS_EMULATOR_RUN_SECONDS``,
``DWS_EMULATOR_EXIT_CODE``) when it has them, else from the job's labels
``dws-emulator-run-seconds`` and ``dws-emulator-exit-code`` (digits), else the defaults (5 s, 0).
A deployed model serves until it is undeployed or its flex-start max runtime ends.

Not modelled: a model registry (any well-formed model name is accepted), PredictionService
(online predictions), bring-your-own-endpoint batch jobs, shared and fine-tuned deployment
resources, and a REST front for these services.
"""

JOB_SERVICE = "google.cloud.aiplatform.v1beta1.JobService"
ENDPOINT_SERVICE = "google.cloud.aiplatform.v1beta1.EndpointService"
JOB_METHODS = (
    "CreateBatchPredictionJob",
    "GetBatchPredictionJob",
    "ListBatchPredictionJobs",
    "CancelBatchPredictionJob",
    "DeleteBatchPredictionJob",
)
ENDPOINT_METHODS = (
    "CreateEndpoint",
    "GetEndpoint",
    "ListEndpoints",
    "DeleteEndpoint",
    "DeployModel",
    "UndeployModel",
)
__all__ = ["ENDPOINT_METHODS", "ENDPOINT_SERVICE", "JOB_METHODS", "JOB_SERVICE"]
