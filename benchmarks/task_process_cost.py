"""CPU a fresh task process spends in a Flex Start task's deferral and resume, against a stock task.

Each step runs in its own interpreter that has first loaded what an Airflow task process has when
its task starts (the task SDK's runner), as Airflow runs each deferral and each resume in a new task
process. Measured: the CPU from the operator's module import to the end of the step (``execute``
until it defers; ``complete`` from a trigger's success event), so the provider's imports and its
own work, not Airflow's nor the API server's. The stock task imports ``DateTimeTrigger`` and
defers on it; its resume does nothing. Prints the median of ``--runs`` and the ratio to stock.

The resume measured is the worker's: since a success of a task whose trigger made its request ends
in the triggerer (``triggers/finish.py``), a deployment runs it only where the trigger cannot end
the task (a failure, a retry, ``outlets``, ``on_success_callback``, ``airflow dags test``).

    python benchmarks/task_process_cost.py --runs 7
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PRELUDE = r"""
import json, sys, time
from datetime import datetime, timezone
import airflow.sdk, airflow.sdk.execution_time.task_runner
from airflow.exceptions import TaskDeferred

class TI:
    dag_id, task_id, run_id, map_index, try_number, max_tries = "d", "t", "r", -1, 1, 0
    start_date = datetime(2026, 1, 1, tzinfo=timezone.utc)
    def __init__(self):
        self.xcom = {}
    def xcom_push(self, key, value):
        self.xcom[key] = value
    def xcom_pull(self, **kwargs):
        return None

start = time.process_time()
"""

STOCK = r"""
from airflow.providers.standard.triggers.temporal import DateTimeTrigger
from airflow.sdk import BaseOperator

class Wait(BaseOperator):
    def execute(self, context):
        self.defer(trigger=DateTimeTrigger(datetime(2030, 1, 1, tzinfo=timezone.utc)), method_name="done")
    def done(self, context, event=None):
        return None

if STEP == "defer":
    try:
        Wait(task_id="t").execute({"ti": TI()})
    except TaskDeferred:
        pass
else:
    Wait(task_id="t").done({"ti": TI()}, {"status": "success"})
"""

PROVIDER = r"""
from airflow_provider_dws.operators.vertex_ai import CreateVertexAIFlexStartJobOperator

POOL = {"machine_spec": {"machine_type": "a3-highgpu-8g", "accelerator_type": "NVIDIA_H100_80GB",
        "accelerator_count": 8}, "replica_count": 1,
        "container_spec": {"image_uri": "us-docker.pkg.dev/p/r/i:1", "args": ["--epochs=3"],
                           "env": [{"name": "A", "value": "1"}]}}

def make():
    return CreateVertexAIFlexStartJobOperator(task_id="t", project_id="my-project", region="us-central1",
                                              worker_pool_specs=[POOL], deferrable=True)

if STEP == "defer":
    try:
        make().execute({"ti": TI()})
    except TaskDeferred as deferred:
        open(RESUME_FILE, "w").write(json.dumps(deferred.trigger.resume))
else:
    event = {"name": "projects/my-project/locations/us-central1/customJobs/7", "state": "JOB_STATE_SUCCEEDED",
             "phase": "succeeded", "failure": None, "message": "", "description": "8 x H100",
             "timings": {"submitted": "2026-01-01T00:00:00+00:00", "started": "2026-01-01T00:10:00+00:00",
                         "finished": "2026-01-01T01:00:00+00:00"},
             "result": {"name": "projects/my-project/locations/us-central1/customJobs/7"},
             "resume": json.loads(open(RESUME_FILE).read())}
    make().attempt_loop().complete({"ti": TI()}, event, {})
"""

EPILOGUE = r"""
print("CPU_MS", (time.process_time() - start) * 1000)
"""


def one(body: str, step: str, resume_file: str, env: dict[str, str]) -> float:
    """CPU ms of one step in a fresh interpreter."""
    code = PRELUDE + body.replace("STEP", repr(step)).replace("RESUME_FILE", repr(resume_file)) + EPILOGUE
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, check=False
    )
    for line in done.stdout.splitlines():
        if line.startswith("CPU_MS "):
            return float(line.split()[1])
    raise SystemExit(f"the {step} step failed:\n{done.stdout}\n{done.stderr}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=7, help="fresh interpreters per step (default 7)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as home:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["AIRFLOW_HOME"] = home
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        resume_file = str(Path(home) / "resume.json")
        results: dict[str, float] = {}
        for name, body in (("stock", STOCK), ("provider", PROVIDER)):
            for step in ("defer", "resume"):
                one(body, step, resume_file, env)  # writes the bytecode, and the resume file
                runs = [one(body, step, resume_file, env) for _ in range(args.runs)]
                results[f"{name} {step}"] = statistics.median(runs)
    for step in ("defer", "resume"):
        provider, stock = results[f"provider {step}"], results[f"stock {step}"]
        print(
            f"{step:7} provider {provider:6.1f} ms   stock {stock:6.1f} ms   ratio {provider / stock:5.2f}x"
        )
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
