"""Credentials and channels for Google Cloud APIs, with the local emulator switch.

Credentials come from the standard ``google_cloud_default`` connection through
apache-airflow-providers-google's :class:`GoogleBaseHook` (key file, ADC, impersonation chain).

Emulator switch, following Google's ``*_EMULATOR_HOST`` convention: when the environment variable
``DWS_EMULATOR_HOST`` (``host:port``) or the connection extra ``dws_emulator_host`` is set, clients
talk to that address over an insecure local channel with anonymous credentials. It is never
implied: it has to be set explicitly, and every hook that uses it says so loudly in the task log.
"""

from __future__ import annotations

import ipaddress
import logging
import os
from collections.abc import Sequence
from typing import Any

from airflow.providers.google.common.hooks.base_google import GoogleBaseHook

EMULATOR_HOST_ENV = "DWS_EMULATOR_HOST"
EMULATOR_HOST_EXTRA = "dws_emulator_host"

log = logging.getLogger(__name__)


def check_emulator_host(value: str) -> str:
    """Validate a ``host:port`` emulator address; only loopback hosts are accepted."""
    host, sep, port = value.strip().rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"emulator host must look like 127.0.0.1:PORT, got {value!r}")
    bare = host.strip("[]")
    loopback = bare == "localhost"
    if not loopback:
        try:
            loopback = ipaddress.ip_address(bare).is_loopback
        except ValueError:
            loopback = False
    if not loopback:
        raise ValueError(
            f"emulator host {value!r} is not a loopback address; the DWS emulator is a local tool "
            "and credentials are never sent to it, so only 127.0.0.0/8, ::1 or localhost are allowed"
        )
    return value.strip()


class DwsBaseHook(GoogleBaseHook):
    """Google Cloud credentials for DWS clients, or the local emulator when it is switched on.

    :param gcp_conn_id: the Airflow connection with Google Cloud credentials.
    :param impersonation_chain: a service account (or chain) to impersonate.
    """

    hook_name = "Google Cloud Dynamic Workload Scheduler"

    def __init__(
        self,
        gcp_conn_id: str = "google_cloud_default",
        impersonation_chain: str | Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        env_host = os.environ.get(EMULATOR_HOST_ENV, "").strip()
        try:
            super().__init__(gcp_conn_id=gcp_conn_id, impersonation_chain=impersonation_chain, **kwargs)
        except Exception:
            # With the emulator switched on by the environment, a missing connection is fine: no
            # credentials are needed. Without it, the missing connection is the user's error.
            if not env_host:
                raise
            self.gcp_conn_id = gcp_conn_id
            self.impersonation_chain = impersonation_chain
            self.quota_project_id = None
            self.extras = {}
            self._cached_credentials = None
            self._cached_project_id = None
        extra_host = self._get_field(EMULATOR_HOST_EXTRA, None)
        if env_host:
            self.emulator_host: str | None = check_emulator_host(env_host)
            self._emulator_source = f"environment variable {EMULATOR_HOST_ENV}"
        elif extra_host:
            self.emulator_host = check_emulator_host(str(extra_host))
            self._emulator_source = f"extra {EMULATOR_HOST_EXTRA!r} of connection {gcp_conn_id!r}"
        else:
            self.emulator_host = None
            self._emulator_source = ""
        if self.emulator_host:
            self.log.warning(
                "DWS EMULATOR MODE: talking to the local dws-emulator at %s over an insecure channel "
                "with anonymous credentials (set by %s). No request reaches Google Cloud.",
                self.emulator_host,
                self._emulator_source,
            )

    @property
    def uses_emulator(self) -> bool:
        """True when clients talk to the local emulator instead of Google Cloud."""
        return self.emulator_host is not None
