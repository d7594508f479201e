"""Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from typing import Any

from airflow_provider_dws import __version__


def get_provider_info() -> dict[str, Any]:
    """What ``airflow providers list`` and the providers manager show for this package."""
    return {
        "package-name": "airflow-provider-dws",
        "name": "Google Cloud Dynamic Workload Scheduler",
        "description": (
            "Run AI training and batch work on scarce GPUs and TPUs through Google Cloud's Dynamic "
            "Workload Scheduler: Vertex AI Flex Start custom jobs, Cloud TPU queued resources, Cloud "
            "Batch Flex Start jobs, Compute Engine flex-start VMs (through MIG resize requests, or standalone), GKE ProvisioningRequests (queued "
            "provisioning), GKE Jobs queued through Kueue and GKE Jobs on flex-start node pools, Vertex AI batch prediction and model deployments on flex-start, waited on in the triggerer; calendar-mode "
            "blocks (Compute Engine future reservations) found, reserved, waited for, consumed by "
            "Vertex AI, Cloud Batch, Compute Engine and Cloud TPU workloads, and released."
        ),
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "Google Cloud Dynamic Workload Scheduler",
                "external-doc-url": "https://cloud.google.com/vertex-ai/docs/training/schedule-jobs-dws",
                "tags": ["gcp"],
            }
        ],
        "operators": [
            {
                "integration-name": "Google Cloud Dynamic Workload Scheduler",
                "python-modules": [
                    "airflow_provider_dws.operators.base",
                    "airflow_provider_dws.operators.release",
                    "airflow_provider_dws.operators.vertex_ai",
                    "airflow_provider_dws.operators.tpu",
                    "airflow_provider_dws.operators.tpu_release",
                    "airflow_provider_dws.operators.batch",
                    "airflow_provider_dws.operators.compute",
                    "airflow_provider_dws.operators.compute_release",
                    "airflow_provider_dws.operators.compute_instances",
                    "airflow_provider_dws.operators.compute_instances_release",
                    "airflow_provider_dws.operators.calendar",
                    "airflow_provider_dws.operators.gke",
                    "airflow_provider_dws.operators.gke_release",
                    "airflow_provider_dws.operators.gke_kueue",
                    "airflow_provider_dws.operators.gke_flex",
                    "airflow_provider_dws.operators.gke_flex_release",
                    "airflow_provider_dws.operators.vertex_inference",
                    "airflow_provider_dws.operators.vertex_endpoint",
                    "airflow_provider_dws.operators.vertex_endpoint_release",
                ],
            }
        ],
        "triggers": [
            {
                "integration-name": "Google Cloud Dynamic Workload Scheduler",
                "python-modules": [
                    "airflow_provider_dws.triggers.capacity_request",
                    "airflow_provider_dws.triggers.resume_at",
                ],
            }
        ],
        "hooks": [
            {
                "integration-name": "Google Cloud Dynamic Workload Scheduler",
                "python-modules": [
                    "airflow_provider_dws.hooks.base",
                    "airflow_provider_dws.hooks.vertex_ai",
                    "airflow_provider_dws.hooks.tpu",
                    "airflow_provider_dws.hooks.tpu_flex",
                    "airflow_provider_dws.hooks.batch",
                    "airflow_provider_dws.hooks.compute",
                    "airflow_provider_dws.hooks.kubernetes",
                ],
            }
        ],
        "extra-links": [
            "airflow_provider_dws.links.VertexAIFlexStartJobLink",
            "airflow_provider_dws.links.TPUQueuedResourceLink",
            "airflow_provider_dws.links.BatchFlexStartJobLink",
            "airflow_provider_dws.links.BatchJobLogsLink",
            "airflow_provider_dws.links.ComputeFlexStartMIGLink",
            "airflow_provider_dws.links.ComputeFlexStartInstancesLink",
            "airflow_provider_dws.links.CalendarBlockLink",
            "airflow_provider_dws.links.GKEProvisioningRequestLink",
            "airflow_provider_dws.links.GKEQueuedJobLink",
            "airflow_provider_dws.links.GKEFlexStartJobLink",
            "airflow_provider_dws.links.VertexAIBatchPredictionLink",
            "airflow_provider_dws.links.VertexAIEndpointLink",
        ],
        # `airflow config list` shows the section and its default (read in triggers/status_line.py).
        "config": {
            "dws": {
                "description": "Google Cloud Dynamic Workload Scheduler provider (airflow-provider-dws).",
                "options": {
                    "log_heartbeat": {
                        "description": (
                            "Seconds between two task-log lines about a capacity request whose state "
                            "has not changed (a line is written on every change of state anyway). "
                            "0 writes lines on changes only. Read by the triggerer (and by the worker "
                            "of a task with deferrable=False)."
                        ),
                        "version_added": "0.1.0",
                        "type": "integer",
                        "example": "300",
                        "default": "600",
                    },
                },
            },
        },
    }
