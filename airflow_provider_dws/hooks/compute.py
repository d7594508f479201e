"""Compute Engine ``compute_v1`` clients: resize requests, instance group managers, instance
templates, instances, future reservations, calendar-mode advice, reservations and operations.

google-cloud-compute speaks only REST and has no async client: the backend runs these sync
clients in its small shared thread pool (:mod:`airflow_provider_dws.backends.compute`). In emulator
mode every client talks plain HTTP to the emulator's REST front (``DWS_EMULATOR_HOST`` port + 1,
:func:`~airflow_provider_dws.hooks.base.emulator_rest_host`) with anonymous credentials.

Every client of one hook is built on the same options (endpoint, credentials): an operation is
then polled where it was made, never on ``compute.googleapis.com`` behind the caller's back (the
trap of the plain ``insert()``, whose ``ExtendedOperation`` polls the global endpoint).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_provider_dws.hooks.base import DwsBaseHook

if TYPE_CHECKING:
    from google.cloud.compute_v1 import (
        AdviceClient,
        FutureReservationsClient,
        GlobalOperationsClient,
        InstanceGroupManagerResizeRequestsClient,
        InstanceGroupManagersClient,
        InstancesClient,
        InstanceTemplatesClient,
        RegionInstanceGroupManagerResizeRequestsClient,
        RegionInstanceGroupManagersClient,
        RegionOperationsClient,
        ReservationsClient,
        ZoneOperationsClient,
    )


class DwsComputeHook(DwsBaseHook):
    """Synchronous Compute Engine clients, each built once per hook (over REST)."""

    def _compute(self, name: str) -> Any:
        from google.cloud import compute_v1

        return self.cached_client(getattr(compute_v1, name), transport="rest")

    def get_resize_requests_client(self) -> InstanceGroupManagerResizeRequestsClient:
        """Resize requests of zonal managed instance groups."""
        return self._compute("InstanceGroupManagerResizeRequestsClient")  # type: ignore[no-any-return]

    def get_region_resize_requests_client(self) -> RegionInstanceGroupManagerResizeRequestsClient:
        """Resize requests of regional managed instance groups."""
        return self._compute("RegionInstanceGroupManagerResizeRequestsClient")  # type: ignore[no-any-return]

    def get_instance_group_managers_client(self) -> InstanceGroupManagersClient:
        """Zonal managed instance groups (insert, get, delete, ``listManagedInstances``, ``deleteInstances``)."""
        return self._compute("InstanceGroupManagersClient")  # type: ignore[no-any-return]

    def get_region_instance_group_managers_client(self) -> RegionInstanceGroupManagersClient:
        """Regional managed instance groups."""
        return self._compute("RegionInstanceGroupManagersClient")  # type: ignore[no-any-return]

    def get_instance_templates_client(self) -> InstanceTemplatesClient:
        """Global instance templates."""
        return self._compute("InstanceTemplatesClient")  # type: ignore[no-any-return]

    def get_instances_client(self) -> InstancesClient:
        """VM instances (their network interfaces and internal IPs)."""
        return self._compute("InstancesClient")  # type: ignore[no-any-return]

    def get_future_reservations_client(self) -> FutureReservationsClient:
        """Future reservations (calendar mode: insert, get, list, cancel, delete)."""
        return self._compute("FutureReservationsClient")  # type: ignore[no-any-return]

    def get_advice_client(self) -> AdviceClient:
        """Compute Engine advice (``calendarMode``: when and where a block of capacity is free)."""
        return self._compute("AdviceClient")  # type: ignore[no-any-return]

    def get_reservations_client(self) -> ReservationsClient:
        """Reservations (those a future reservation creates when it is delivered)."""
        return self._compute("ReservationsClient")  # type: ignore[no-any-return]

    def get_zone_operations_client(self) -> ZoneOperationsClient:
        """Zonal operations (what a zonal MIG's calls return)."""
        return self._compute("ZoneOperationsClient")  # type: ignore[no-any-return]

    def get_region_operations_client(self) -> RegionOperationsClient:
        """Regional operations."""
        return self._compute("RegionOperationsClient")  # type: ignore[no-any-return]

    def get_global_operations_client(self) -> GlobalOperationsClient:
        """Global operations (instance templates)."""
        return self._compute("GlobalOperationsClient")  # type: ignore[no-any-return]
