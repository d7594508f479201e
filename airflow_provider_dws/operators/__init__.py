"""The DWS operators, one module per surface; the names below load their module on first use only."""

from __future__ import annotations

import importlib
from typing import Any

#: Operator name -> its module (imported when the name is first asked for: a DAG's parse loads only
#: the operators it uses).
_EXPORTS = {
    "CreateGKEQueuedJobOperator": "airflow_provider_dws.operators.gke_kueue",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
