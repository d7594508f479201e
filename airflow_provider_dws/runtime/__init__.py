"""What runs when a task runs: the shared attempt loop and one adapter per DWS API.

Nothing here is imported while a DAG file is parsed: the operators (:mod:`airflow_provider_dws.operators`)
hold parameters and parse-time checks only, and load this package from ``execute``. A new DWS
surface adds one :class:`~airflow_provider_dws.runtime.adapter.RequestAdapter` here; the loop, the
trigger, the poller, the retries and the cancel path are shared.
"""
