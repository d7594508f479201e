"""What parsing a DAG file that uses the provider costs the dag-processor, per parse.

The model is Airflow 3's dag-processor: its manager process imports, once, the ``airflow.*``
modules a DAG file names (``_pre_import_airflow_modules``, with ``airflow.utils.file``'s
``iter_airflow_imports``); every parse is a forked child that imports the rest, builds the DAG,
serializes it and sends the result to the manager. So what a child imports beyond ``airflow.*``
is paid again at every parse.

Two kinds of child are measured, each with and without compiled bytecode:

- ``parse`` (gated): what the dag-processor's child really does for a file, by calling Airflow's
  own ``airflow.dag_processing.processor._parse_file`` (the DAG-stability check, the ``DagBag``
  that imports the file, ``DagSerialization`` of every DAG) and encoding its result as the frame
  the child sends over its socket (``_RequestFrame(...).as_bytes()``); nothing is mocked;
- ``import`` (reported): only the import of the DAG file as a module, the part of a parse that a
  provider's code can change; a stricter view of the same cost.

Bytecode:

- ``compiled``: bytecode in ``__pycache__`` (one unmeasured parse per file first writes it);
- ``source``: ``PYTHONDONTWRITEBYTECODE=1`` and an empty ``PYTHONPYCACHEPREFIX`` per run, so every
  import compiles its module, as on a fresh machine or CI clone whose caches are not written.

For each of the four columns, one parent process (``--parent``) imports what the dag-processor's
manager has, then forks a child per DAG file per repetition (round robin over the files, so load
from elsewhere spreads over all rows) and reads the child's CPU time (user + system) from
``os.wait4``. The median per row and its ratio to the ``BashOperator`` DAG are printed; the target
is every row of this provider at most ``--target`` (1.2) times its reference in both ``parse``
columns, exit 1 if one misses it (the ``import`` columns are reported, not gated). The reference is
the one-task ``BashOperator`` DAG for each operator alone and for the off-peak timetable; for every
family in one file (one task per family, on the timetable) it is that row's floor, as many ``BashOperator`` tasks on
the same timetable: serializing that many tasks and the timetable alone costs about 1.35x the one-task
DAG, so no operator, however cheap, could bring that row to 1.2x of the one-task DAG.

Every column runs with ``AIRFLOW__CORE__LOAD_EXAMPLES=False`` (baseline included). Serializing a
DAG whose timetable is not Airflow's own loads every plugin in the parse child
(``find_registered_custom_timetable`` -> ``plugins_manager.get_timetables_plugins``), and with
Airflow's default ``load_examples=True`` that imports the 7 modules of
``airflow.example_dags.plugins`` at every parse: Airflow's demo code, not the provider's. Managed
deployments (Cloud Composer, the official Helm chart) run with ``load_examples`` False, so that is
the configuration measured.

The DAG files are generated from ``ROWS`` below; the provider's classes are found by name pattern
in its source (no import), so renamed operators are picked up without editing this file.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "airflow_provider_dws"

HEADER = """\
from datetime import datetime, timedelta

from airflow.sdk import DAG
"""

DAG_OPEN = 'with DAG(dag_id="parse_cost_{row}", schedule={schedule}, start_date=datetime(2026, 1, 1), catchup=False) as dag:'


@dataclass(frozen=True)
class Row:
    """One DAG file: ``task`` is the body under ``with DAG(...)``.

    ``{Name}`` in ``task`` or ``schedule`` stands for the provider's class ``CLASSES[Name]``
    (found by a pattern on its name in the source, not imported); the file imports each one used.
    """

    name: str
    #: The provider's rows are gated (PASS/FAIL); the others are the baseline and a reference.
    ours: bool
    task: str
    imports: str = ""
    schedule: str = "None"
    #: The name of the row a gated row is compared with; the one-task Bash DAG by default.
    reference: str = "BashOperator (baseline)"


#: The provider's classes the rows use: (folder under the package, pattern on the class name).
CLASSES = {
    # Vertex only: the Batch operator's name has FlexStart in it too.
    "Vertex": ("operators", r"\w*Vertex\w*FlexStart\w*Operator"),
    "Batch": ("operators", r"\w*Batch\w*Operator"),
    "Compute": ("operators", r"Create\w*FlexStartVMs\w*Operator"),
    "ComputeDelete": ("operators", r"Delete\w*FlexStartVMs\w*Operator"),
    "Instances": ("operators", r"Create\w*FlexStartInstances\w*Operator"),
    "InstancesDelete": ("operators", r"Delete\w*FlexStartInstances\w*Operator"),
    "TPU": ("operators", r"(?!Delete)\w*QueuedResource\w*Operator"),
    "TPUDelete": ("operators", r"Delete\w*QueuedResource\w*Operator"),
    "Find": ("operators", r"Find\w*Calendar\w*Operator"),
    "Reserve": ("operators", r"Reserve\w*Calendar\w*Operator"),
    "WaitFor": ("operators", r"WaitFor\w*Calendar\w*Operator"),
    "Release": ("operators", r"Release\w*Calendar\w*Operator"),
    "GKE": ("operators", r"Create\w*ProvisioningRequest\w*Operator"),
    "GKEDelete": ("operators", r"Delete\w*ProvisioningRequest\w*Operator"),
    "Kueue": ("operators", r"Create\w*QueuedJob\w*Operator"),
    "Flex": ("operators", r"CreateGKEFlexStartJob\w*Operator"),
    "VertexBatch": ("operators", r"Create\w*BatchPrediction\w*Operator"),
    "VertexDeploy": ("operators", r"Deploy\w*Model\w*Operator"),
    "VertexUndeploy": ("operators", r"Undeploy\w*Model\w*Operator"),
    "Timetable": ("timetables", r"\w*Timetable"),
}

BASH = "from airflow.providers.standard.operators.bash import BashOperator\n"
WORKER_POOL = """[
    {
        "machine_spec": {
            "machine_type": "a3-highgpu-8g",
            "accelerator_type": "NVIDIA_H100_80GB",
            "accelerator_count": 8,
        },
        "replica_count": 1,
        "container_spec": {"image_uri": "us-docker.pkg.dev/my-project/train/llm:latest"},
    }
]"""
POD_TEMPLATE = """{
    "spec": {
        "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"},
        "containers": [
            {
                "name": "train",
                "image": "us-docker.pkg.dev/my-project/train/llm:latest",
                "resources": {"limits": {"nvidia.com/gpu": "8"}},
            }
        ],
    }
}"""

#: One task per operator family, with right parameters (the parse-time checks pass).
TASKS = {
    "Vertex": '{Vertex}(task_id="train", project_id="my-project", region="us-central1", display_name="train", '
    "worker_pool_specs=WORKER_POOL, max_wait=timedelta(hours=1))",
    "Batch": '{Batch}(task_id="infer", project_id="my-project", region="us-central1", '
    'image_uri="us-docker.pkg.dev/my-project/infer/batch:1", task_count=16, parallelism=16, '
    'machine_type="g2-standard-8", accelerator_type="nvidia-l4", max_wait=timedelta(hours=2))',
    "Compute": '{Compute}(task_id="ask_for_vms", project_id="my-project", zone="us-central1-a", '
    'machine_type="a3-highgpu-8g", resize_by=4, max_run=timedelta(hours=6), max_wait=timedelta(hours=2))',
    "ComputeDelete": '{ComputeDelete}(task_id="release_vms", project_id="my-project", setup_task_id="ask_for_vms")',
    "Instances": '{Instances}(task_id="ask_for_vm_set", project_id="my-project", zone="us-central1-a", '
    'machine_type="a3-highgpu-8g", count=2, max_run=timedelta(hours=4), max_wait=timedelta(hours=2))',
    "InstancesDelete": '{InstancesDelete}(task_id="release_vm_set", project_id="my-project", '
    'setup_task_id="ask_for_vm_set")',
    "TPU": '{TPU}(task_id="request_slice", project_id="my-project", zone="us-west4-a", '
    'accelerator_type="v5litepod-16", runtime_version="v2-alpha-tpuv5-lite", max_wait=timedelta(hours=1))',
    "TPUDelete": '{TPUDelete}(task_id="release_slice", project_id="my-project", zone="us-west4-a", '
    'queued_resource_id="my-slice")',
    "Find": '{Find}(task_id="find_block", project_id="my-project", zones=["us-central1-a", "us-east4-b"], '
    'machine_type="a3-highgpu-8g", vm_count=8, duration=timedelta(days=7), latest_start=timedelta(weeks=4))',
    "Reserve": '{Reserve}(task_id="reserve_block", project_id="my-project", find_task_id="find_block")',
    "WaitFor": '{WaitFor}(task_id="wait_for_block", project_id="my-project", reserve_task_id="reserve_block")',
    "Release": '{Release}(task_id="release_block", project_id="my-project", setup_task_id="reserve_block")',
    "GKE": '{GKE}(task_id="request_nodes", project_id="my-project", location="us-central1", '
    'cluster_name="train", pod_template=POD_TEMPLATE, count=2, max_run=timedelta(hours=4), '
    "max_wait=timedelta(hours=6))",
    "GKEDelete": '{GKEDelete}(task_id="release_nodes", setup_task_id="request_nodes")',
    "Kueue": '{Kueue}(task_id="finetune", project_id="my-project", location="us-central1", cluster_name="train", '
    'queue_name="dws-queue", image="us-docker.pkg.dev/my-project/train/llm:latest", '
    'cmds=["python", "-m", "finetune"], accelerator="nvidia-l4", gpus=1, parallelism=4, '
    "max_wait=timedelta(hours=12))",
    "Flex": '{Flex}(task_id="evaluate", project_id="my-project", location="us-central1", cluster_name="train", '
    'image="us-docker.pkg.dev/my-project/eval/eval:latest", cmds=["python", "-m", "evaluate"], '
    'accelerator="nvidia-l4", gpus=4, parallelism=2, max_wait=timedelta(hours=1))',
    "VertexBatch": '{VertexBatch}(task_id="score", project_id="my-project", region="us-central1", '
    'model="projects/my-project/locations/us-central1/models/scorer", machine_type="g2-standard-48", '
    'gcs_source="gs://my-bucket/inputs/*.jsonl", gcs_destination_prefix="gs://my-bucket/scores", '
    "max_wait=timedelta(hours=2), max_run=timedelta(hours=4))",
    "VertexDeploy": '{VertexDeploy}(task_id="serve", project_id="my-project", region="us-central1", '
    'model="projects/my-project/locations/us-central1/models/scorer", machine_type="a3-highgpu-1g", '
    "max_wait=timedelta(hours=1), max_run=timedelta(hours=8))",
    "VertexUndeploy": '{VertexUndeploy}(task_id="undeploy", setup_task_id="serve", region="us-central1")',
}
OFF_PEAK = '{Timetable}("Mon-Fri 22:00-06:00 America/Chicago")'
FLOOR = f"{len(TASKS)} BashOperators, off-peak (floor of the row above)"

ROWS = [
    Row("BashOperator (baseline)", False, 'BashOperator(task_id="hello", bash_command="echo hello")', BASH),
    Row(
        "google CreateCustomJobOperator",
        False,
        'CreateCustomJobOperator(task_id="train", project_id="my-project", region="us-central1", '
        'custom_job={"display_name": "train", "job_spec": {"worker_pool_specs": WORKER_POOL, '
        '"scheduling": {"strategy": "FLEX_START", "max_wait_duration": "3600s"}}})',
        "from airflow.providers.google.cloud.operators.vertex_ai.custom_job import CreateCustomJobOperator\n",
    ),
    Row("dws Vertex Flex Start", True, TASKS["Vertex"]),
    Row("dws Batch Flex Start", True, TASKS["Batch"]),
    Row("dws Compute flex-start VMs", True, TASKS["Compute"]),
    Row("dws Compute delete", True, TASKS["ComputeDelete"]),
    Row("dws Compute flex-start VMs, no MIG", True, TASKS["Instances"]),
    Row("dws Compute VMs, no MIG, delete", True, TASKS["InstancesDelete"]),
    Row("dws TPU queued resource", True, TASKS["TPU"]),
    Row("dws TPU delete", True, TASKS["TPUDelete"]),
    Row("dws GKE ProvisioningRequest", True, TASKS["GKE"]),
    Row("dws GKE ProvisioningRequest delete", True, TASKS["GKEDelete"]),
    Row("dws GKE Kueue Job", True, TASKS["Kueue"]),
    Row("dws GKE flex-start Job", True, TASKS["Flex"]),
    Row("dws Vertex batch prediction", True, TASKS["VertexBatch"]),
    Row("dws Vertex deploy model", True, TASKS["VertexDeploy"]),
    Row("dws Vertex undeploy model", True, TASKS["VertexUndeploy"]),
    Row(
        "dws off-peak timetable",
        True,
        'BashOperator(task_id="hello", bash_command="echo hello")',
        BASH,
        schedule=OFF_PEAK,
    ),
    # Every family in one file, as a team's DAG folder may have it: each operator module, the
    # calendar operators and the timetable imported together, every check run once.
    # Gated against its floor, the next row.
    Row("dws every family, off-peak", True, "\n".join(TASKS.values()), schedule=OFF_PEAK, reference=FLOOR),
    # Its floor (reference, not gated): as many tasks and the same schedule, with operators that
    # cost nothing to import (BashOperator, pre-imported): what serializing as many tasks and loading
    # the plugins that register the timetable cost whoever's operators they are.
    Row(
        FLOOR,
        False,
        "\n".join(f'BashOperator(task_id="hello_{i}", bash_command="echo hello")' for i in range(len(TASKS))),
        BASH,
        schedule=OFF_PEAK,
    ),
]


def find_class(folder: str, pattern: str) -> tuple[str, str]:
    """(module, class) of the first class whose whole name matches, read from source, not imported."""
    regex = re.compile(pattern)
    for path in sorted((PACKAGE_DIR / folder).rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and regex.fullmatch(node.name) and "Base" not in node.name:
                relative = path.relative_to(PACKAGE_DIR.parent).with_suffix("")
                return ".".join(relative.parts), node.name
    raise SystemExit(f"no class matching {pattern!r} under {PACKAGE_DIR / folder}: update CLASSES")


def dag_source(row: Row, slug: str) -> str:
    """The DAG file of one row."""
    used = [name for name in CLASSES if "{" + name + "}" in row.task + row.schedule]
    found = {name: find_class(*CLASSES[name]) for name in used}
    imports = "".join(f"from {module} import {cls}\n" for module, cls in found.values())

    def fill(text: str) -> str:
        for name, (_, cls) in found.items():
            text = text.replace("{" + name + "}", cls)
        return text

    return (
        HEADER
        + row.imports
        + imports
        + f"\nWORKER_POOL = {WORKER_POOL}\nPOD_TEMPLATE = {POD_TEMPLATE}\n\n"
        + DAG_OPEN.format(row=slug, schedule=fill(row.schedule))
        + "\n"
        + textwrap.indent(fill(row.task), "    ")
        + "\n"
    )


# ---------------------------------------------------------------------------------------------
# The dag-processor model (runs in a fresh process per column).


#: The kinds of child (see the module's docstring).
MODES = ("parse", "import")


def _parse_in_child(path: str, mode: str) -> None:
    """What the forked child does: Airflow's own parse of the file (``parse``), or only its import."""
    try:
        if mode == "parse":
            _airflow_parse(path)
            os._exit(0)
        spec = importlib.util.spec_from_file_location(f"unusual_prefix_parse_cost_{Path(path).stem}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        from airflow.sdk import DAG

        if not any(isinstance(value, DAG) for value in vars(module).values()):
            raise RuntimeError(f"{path} defines no DAG")
    except BaseException:
        traceback.print_exc()
        os._exit(1)
    os._exit(0)


def _airflow_parse(path: str) -> None:
    """The dag-processor child's work for one file: ``_parse_file``, then the frame it would send."""
    from airflow.dag_processing.processor import DagFileParseRequest, _parse_file

    os.environ["_AIRFLOW_PROCESS_CONTEXT"] = "client"  # as _parse_file_entrypoint sets it
    import structlog

    # Airflow 3.0's request also names the child's socket, which this model never writes to.
    extra = {"requests_fd": 0} if "requests_fd" in DagFileParseRequest.model_fields else {}
    request = DagFileParseRequest(file=path, bundle_path=Path(path).parent, bundle_name="parse-cost", **extra)
    result = _parse_file(request, structlog.get_logger(logger_name="task"))
    if result is None or not result.serialized_dags or result.import_errors:
        raise RuntimeError(f"{path} did not parse: {result and result.import_errors}")
    try:
        from airflow.sdk.execution_time.comms import _RequestFrame
    except ImportError:  # Airflow 3.0: a line of JSON (task_runner's CommsDecoder.send_request)
        (result.model_dump_json() + "\n").encode()
    else:
        _RequestFrame(id=0, body=result.model_dump()).as_bytes()


def _fork(target: Callable[[], None]) -> tuple[int, float]:
    """Run ``target`` in a forked child (it must ``os._exit``): its exit code and CPU seconds."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            target()
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(1)  # target exits itself on success
    _, status, usage = os.wait4(pid, 0)
    return os.waitstatus_to_exitcode(status), usage.ru_utime + usage.ru_stime


def _processor_for(path: str, mode: str, commands: int, results: int) -> None:
    """A dag-processor that has seen only this file: pre-import its airflow.* modules once, then
    parse it in a forked child for every byte read from ``commands``; write [exit code, CPU s]."""
    import gc

    from airflow.utils.file import iter_airflow_imports

    for module in iter_airflow_imports(path):
        importlib.import_module(module)
    gc.collect()
    with os.fdopen(commands, "rb", buffering=0) as requests, os.fdopen(results, "w") as answers:
        while requests.read(1):
            code, cpu = _fork(lambda: _parse_in_child(path, mode))
            answers.write(json.dumps([code, cpu]) + "\n")
            answers.flush()
    os._exit(0)


def parent(files: list[str], mode: str, repeat: int, warmup: int) -> dict[str, list[float]]:
    """CPU seconds of each parse of each file, ``warmup`` rounds dropped.

    This process imports what every dag-processor has (``airflow.sdk``, the processor's own
    modules). Pre-imports are per DAG file, so that one row's ``airflow.*`` imports (the
    providers-google row brings all of ``google.cloud.aiplatform``) do not make another's free:
    each file gets a forked processor that pre-imports its modules and forks the measured
    children. Rounds go over all files in turn, so load from elsewhere spreads over every row.
    """
    import gc

    # What the manager has imported before it forks a parse: its own modules and the processor's.
    import airflow.dag_processing.manager
    import airflow.dag_processing.processor
    import airflow.sdk  # noqa: F401
    import structlog

    # The child's log lines (DagBag's "Filling up the DagBag ...") are rendered, not shown.
    structlog.configure(logger_factory=structlog.WriteLoggerFactory(open(os.devnull, "w")))  # noqa: SIM115

    # What DagFileProcessorManager.before_run does before its parsing loop ("to prevent COW in
    # forked process parsing dag file"): the children's collections skip these objects.
    gc.freeze()
    processors: list[tuple[int, str, int, TextIO]] = []
    for path in files:
        command_read, command_write = os.pipe()
        result_read, result_write = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            try:
                # Only this processor's ends: an inherited write end of another's command pipe
                # would keep that one from seeing end-of-file.
                os.close(command_write)
                os.close(result_read)
                for _, _, other_command, other_answers in processors:
                    os.close(other_command)
                    other_answers.close()
                _processor_for(path, mode, command_read, result_write)
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(1)  # never return into the parent's loop
        os.close(command_read)
        os.close(result_write)
        processors.append((pid, path, command_write, os.fdopen(result_read)))

    samples: dict[str, list[float]] = {path: [] for path in files}
    for round_ in range(warmup + repeat):
        for _, path, command, answers in processors:
            os.write(command, b"p")
            answer = answers.readline()
            code, cpu = json.loads(answer) if answer else (1, 0.0)
            if code:
                raise SystemExit(f"parsing {path} failed (see above)")
            if round_ >= warmup:
                samples[path].append(cpu)
    for pid, _, command, answers in processors:
        os.close(command)
        answers.close()
        os.waitpid(pid, 0)
    return samples


#: The columns, in print order: (mode, compiled bytecode).
COLUMNS = (("parse", True), ("parse", False), ("import", True), ("import", False))


def column_name(mode: str, compiled: bool) -> str:
    """``"parse compiled"``, ``"import source"``, ..."""
    return f"{mode} {'compiled' if compiled else 'source'}"


def run_column(
    files: list[str], repeat: int, mode: str, compiled: bool, workdir: Path
) -> dict[str, list[float]]:
    """One column in a fresh parent process with that column's bytecode settings."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("PYTHONPYCACHEPREFIX", None)
    env.setdefault("AIRFLOW_HOME", str(workdir / "airflow-home"))
    # As managed deployments run: no example DAGs, so no example plugins loaded by the parse of a
    # DAG on a custom timetable (see the module's docstring).
    env["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    if not compiled:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="pycache-empty-", dir=workdir)
    command = [sys.executable, __file__, "--parent", *files, "--mode", mode, "--repeat", str(repeat)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"the {column_name(mode, compiled)} run failed:\n{done.stdout}{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7, help="measured parses per file and column")
    parser.add_argument("--target", type=float, default=1.2, help="max ratio to a row's reference")
    parser.add_argument("--json", type=Path, help="write every sample here")
    parser.add_argument("--show-dags", action="store_true", help="print the generated DAG files")
    parser.add_argument("--parent", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=MODES, default="parse", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.parent:
        print(json.dumps(parent(args.parent, args.mode, args.repeat, warmup=1)))
        return 0

    with tempfile.TemporaryDirectory(prefix="parse-cost-") as tmp:
        workdir = Path(tmp)
        files = []
        for index, row in enumerate(ROWS):
            slug = f"row{index}"
            path = workdir / "dags" / f"{slug}.py"
            path.parent.mkdir(exist_ok=True)
            path.write_text(dag_source(row, slug))
            files.append(str(path))
            if args.show_dags:
                print(f"# --- {row.name}: {path.name}\n{path.read_text()}")
        columns = {
            column_name(mode, compiled): run_column(files, args.repeat, mode, compiled, workdir)
            for mode, compiled in COLUMNS
        }

    medians = {col: [statistics.median(samples[f]) for f in files] for col, samples in columns.items()}
    ratios = {col: [m / values[0] for m in values] for col, values in medians.items()}
    print(
        f"CPU per parse (user + system of the forked child), median of {args.repeat}; "
        f"ratio to the BashOperator DAG. parse: Airflow's own parse of the file (import, "
        f"serialization, result frame); import: the DAG file's import only\n"
    )
    print(
        "| DAG | "
        + " | ".join(f"{col} ms | x Bash" for col in columns)
        + " |\n|---|"
        + "---:|---:|" * len(columns)
    )
    for i, row in enumerate(ROWS):
        cells = [f"{medians[col][i] * 1000:.0f} | {ratios[col][i]:.2f}" for col in columns]
        print(f"| {row.name} | " + " | ".join(cells) + " |")
    print()
    failed = False
    gated = [column_name("parse", True), column_name("parse", False)]
    index = {row.name: i for i, row in enumerate(ROWS)}
    for i, row in enumerate(ROWS):
        if not row.ours:
            continue
        ref = index[row.reference]
        against = {col: medians[col][i] / medians[col][ref] for col in columns}
        shown = ", ".join(f"{against[col]:.2f}x {col}" for col in columns)
        ok = max(against[col] for col in gated) <= args.target
        failed |= not ok
        print(
            f"{'PASS' if ok else 'FAIL'} {row.name}: {shown} against {row.reference!r} "
            f"(target <= {args.target}x on the parse columns)"
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "rows": [row.name for row in ROWS],
                    "samples_s": {col: [columns[col][f] for f in files] for col in columns},
                },
                indent=2,
            )
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
