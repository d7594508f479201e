"""The provider's example Airflow DAGs, loaded unchanged from ``example_dags/`` for the fault matrix.

Each example file is executed as it is; its DAG (``dws_vertex_flex_start``,
``dws_tpu_queued_resource``, ``dws_batch_flex_start``) is registered from this file, so the harness
drives the very DAGs users copy, with the ``DWS_EXAMPLE_*`` variables the deployment sets.
"""

from __future__ import annotations

import runpy
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[3] / "example_dags"

for _name in ("vertex_flex_start", "tpu_queued_resource", "batch_flex_start"):
    globals()[f"{_name}_dag"] = runpy.run_path(
        str(EXAMPLES / f"{_name}.py"), run_name=f"dws_example_{_name}"
    )["dag"]
