"""Apache Airflow provider for Google Cloud Dynamic Workload Scheduler (DWS)."""

from __future__ import annotations

__version__ = "0.1.0"
