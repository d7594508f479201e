"""Cloud TPU flex-start queued resources (Preview): the TPU backend over ``tpu.v2alpha1``.

Everything but the transport is :class:`~.tpu.TpuQueuedResourceBackend`'s: the names, the
lookups, the classification (a flex-start run that ended is ``SUSPENDED``, an ended request like
a FAILED one), the give-up. The calls go through
:class:`~airflow_provider_dws.hooks.tpu_flex.FlexTpuClient`, the only client that can ask for the
FLEX_START provisioning model and a run duration (see :mod:`airflow_provider_dws.hooks.tpu_flex`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from airflow_provider_dws.backends.base import RequestStatus
from airflow_provider_dws.backends.tpu import TpuQueuedResourceBackend
from airflow_provider_dws.hooks.tpu_flex import DwsTpuFlexAsyncHook, DwsTpuFlexHook


class TpuFlexStartBackend(TpuQueuedResourceBackend):
    """Create (flex-start only), read, list and delete queued resources through ``v2alpha1``."""

    kind = "tpu_flex_start"
    sync_hook_class = DwsTpuFlexHook  # type: ignore[assignment]
    async_hook_class = DwsTpuFlexAsyncHook  # type: ignore[assignment]

    def status_of(self, qr: Any) -> RequestStatus:
        """As every slice's, described as flex-start (the ``v2`` message this backend reads the
        ``v2alpha1`` answer into has no field for it; this backend only serves flex-start tasks)."""
        status = super().status_of(qr)
        return dataclasses.replace(status, description=f"flex-start {status.description}")

    def _create_operation(self, request_id: str, request: Any, run: dict[str, str] | None) -> Any:
        if not run:
            raise ValueError("a flex-start queued resource needs its run duration")
        return self._client().create_flex_start(self.parent, request_id, request, run)
