"""What parsing a DAG file that uses the provider costs the dag-processor, per parse.

The model is Airflow 3's dag-processor: its parent process imports, once, the ``airflow.*``
modules a DAG file names (``_pre_import_airflow_modules``, with ``airflow.utils.file``'s
``iter_airflow_imports``); every parse is a forked child that imports the rest and builds the
DAG. So what a child imports beyond ``airflow.*`` is paid again at every parse.

One run measures, side by side:

- ``compiled``: bytecode in ``__pycache__`` (one unmeasured parse per file first writes it);
- ``source``: ``PYTHONDONTWRITEBYTECODE=1`` and an empty ``PYTHONPYCACHEPREFIX`` per run, so every
  import compiles its module, as on a fresh machine or CI clone whose caches are not written.

For each, one parent process (``--parent``) imports what the dag-processor's parent has, then
forks a child per DAG file per repetition (round robin over the files, so load from elsewhere
spreads over all rows) and reads the child's CPU time (user + system) from ``os.wait4``. The
median per row and its ratio to the ``BashOperator`` DAG are printed; the target is every operator
of this provider at most ``--target`` (1.5) times the ``BashOperator`` DAG in both columns, exit 1
if one misses it (the timetable row is reported, not gated).

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

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "airflow_provider_dws"

HEADER = """\
from datetime import datetime, timedelta

from airflow.sdk import DAG
"""

DAG_OPEN = 'with DAG(dag_id="parse_cost_{row}", schedule={schedule}, start_date=datetime(2026, 1, 1), catchup=False) as dag:'


@dataclass(frozen=True)
class Row:
    """One DAG file: ``task`` is the body under ``with DAG(...)``, ``{cls}`` the class it uses.

    ``find`` locates one of the provider's classes by a pattern on its name in the source files
    under ``find[0]`` (relative to the package); ``cls`` names a fixed class instead.
    """

    name: str
    ours: bool
    imports: str
    task: str
    schedule: str = "None"
    find: tuple[str, str] | None = None
    cls: str = ""
    #: Whether the row counts for PASS/FAIL: the target is set for the provider's operators; other
    #: rows of ours (the timetable) are reported beside them.
    gated: bool = True


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

ROWS = [
    Row("BashOperator (baseline)", False, BASH, 'BashOperator(task_id="hello", bash_command="echo hello")'),
    Row(
        "google CreateCustomJobOperator",
        False,
        "from airflow.providers.google.cloud.operators.vertex_ai.custom_job import CreateCustomJobOperator\n",
        'CreateCustomJobOperator(task_id="train", project_id="my-project", region="us-central1", '
        'custom_job={"display_name": "train", "job_spec": {"worker_pool_specs": WORKER_POOL, '
        '"scheduling": {"strategy": "FLEX_START", "max_wait_duration": "3600s"}}})',
    ),
    Row(
        "dws Vertex Flex Start",
        True,
        "from {module} import {cls}\n",
        '{cls}(task_id="train", project_id="my-project", region="us-central1", display_name="train", '
        "worker_pool_specs=WORKER_POOL, max_wait=timedelta(hours=1))",
        # Vertex only: the Batch operator's name has FlexStart in it too.
        find=("operators", r"\w*Vertex\w*FlexStart\w*Operator"),
    ),
    Row(
        "dws Batch Flex Start",
        True,
        "from {module} import {cls}\n",
        '{cls}(task_id="infer", project_id="my-project", region="us-central1", '
        'image_uri="us-docker.pkg.dev/my-project/infer/batch:1", task_count=16, parallelism=16, '
        'machine_type="g2-standard-8", accelerator_type="nvidia-l4", max_wait=timedelta(hours=2))',
        find=("operators", r"\w*Batch\w*Operator"),
    ),
    Row(
        "dws TPU queued resource",
        True,
        "from {module} import {cls}\n",
        '{cls}(task_id="request_slice", project_id="my-project", zone="us-west4-a", '
        'accelerator_type="v5litepod-16", runtime_version="v2-alpha-tpuv5-lite", max_wait=timedelta(hours=1))',
        find=("operators", r"(?!Delete)\w*QueuedResource\w*Operator"),
    ),
    Row(
        "dws TPU delete",
        True,
        "from {module} import {cls}\n",
        '{cls}(task_id="release_slice", project_id="my-project", zone="us-west4-a", queued_resource_id="my-slice")',
        find=("operators", r"Delete\w*QueuedResource\w*Operator"),
    ),
    Row(
        "dws off-peak timetable",
        True,
        BASH + "from {module} import {cls}\n",
        'BashOperator(task_id="hello", bash_command="echo hello")',
        schedule='{cls}("Mon-Fri 22:00-06:00 America/Chicago")',
        find=("timetables", r"\w*Timetable"),
        gated=False,
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
    raise SystemExit(f"no class matching {pattern!r} under {PACKAGE_DIR / folder}: update ROWS")


def dag_source(row: Row, slug: str) -> str:
    """The DAG file of one row."""
    module, cls = find_class(*row.find) if row.find else ("", row.cls)

    def fill(text: str) -> str:
        return text.replace("{module}", module).replace("{cls}", cls)

    return (
        HEADER
        + fill(row.imports)
        + f"\nWORKER_POOL = {WORKER_POOL}\n\n"
        + DAG_OPEN.format(row=slug, schedule=fill(row.schedule))
        + "\n"
        + textwrap.indent(fill(row.task), "    ")
        + "\n"
    )


# ---------------------------------------------------------------------------------------------
# The dag-processor model (runs in a fresh process per column).


def _parse_in_child(path: str) -> None:
    """What the forked child does: load the file as a module of its own, as DagBag does."""
    try:
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


def _processor_for(path: str, commands: int, results: int) -> None:
    """A dag-processor that has seen only this file: pre-import its airflow.* modules once, then
    parse it in a forked child for every byte read from ``commands``; write [exit code, CPU s]."""
    import gc

    from airflow.utils.file import iter_airflow_imports

    for module in iter_airflow_imports(path):
        importlib.import_module(module)
    gc.collect()
    with os.fdopen(commands, "rb", buffering=0) as requests, os.fdopen(results, "w") as answers:
        while requests.read(1):
            code, cpu = _fork(lambda: _parse_in_child(path))
            answers.write(json.dumps([code, cpu]) + "\n")
            answers.flush()
    os._exit(0)


def parent(files: list[str], repeat: int, warmup: int) -> dict[str, list[float]]:
    """CPU seconds of each parse of each file, ``warmup`` rounds dropped.

    This process imports what every dag-processor has (``airflow.sdk``, the processor's own
    modules). Pre-imports are per DAG file, so that one row's ``airflow.*`` imports (the
    providers-google row brings all of ``google.cloud.aiplatform``) do not make another's free:
    each file gets a forked processor that pre-imports its modules and forks the measured
    children. Rounds go over all files in turn, so load from elsewhere spreads over every row.
    """
    import gc

    import airflow.dag_processing.processor
    import airflow.sdk  # noqa: F401

    # What DagFileProcessorManager.before_run does before its parsing loop ("to prevent COW in
    # forked process parsing dag file"): the children's collections skip these objects.
    gc.freeze()
    processors = []
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
                _processor_for(path, command_read, result_write)
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


def run_column(files: list[str], repeat: int, compiled: bool, workdir: Path) -> dict[str, list[float]]:
    """One column in a fresh parent process with that column's bytecode settings."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("PYTHONPYCACHEPREFIX", None)
    env.setdefault("AIRFLOW_HOME", str(workdir / "airflow-home"))
    if not compiled:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="pycache-empty-", dir=workdir)
    command = [sys.executable, __file__, "--parent", *files, "--repeat", str(repeat)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(
            f"the {'compiled' if compiled else 'source'} run failed:\n{done.stdout}{done.stderr}"
        )
    return json.loads(done.stdout.splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7, help="measured parses per file and column")
    parser.add_argument("--target", type=float, default=1.5, help="max ratio to the BashOperator DAG")
    parser.add_argument("--json", type=Path, help="write every sample here")
    parser.add_argument("--show-dags", action="store_true", help="print the generated DAG files")
    parser.add_argument("--parent", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.parent:
        print(json.dumps(parent(args.parent, args.repeat, warmup=1)))
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
            "compiled": run_column(files, args.repeat, True, workdir),
            "source": run_column(files, args.repeat, False, workdir),
        }

    medians = {col: [statistics.median(samples[f]) for f in files] for col, samples in columns.items()}
    print(
        f"CPU per parse (user + system of the forked child), median of {args.repeat}; "
        f"ratio to the BashOperator DAG\n"
    )
    print("| DAG | compiled ms | x Bash | source ms | x Bash |\n|---|---:|---:|---:|---:|")
    for i, row in enumerate(ROWS):
        cells = []
        for col in ("compiled", "source"):
            cells += [f"{medians[col][i] * 1000:.0f}", f"{medians[col][i] / medians[col][0]:.2f}"]
        print(f"| {row.name} | " + " | ".join(cells) + " |")
    print()
    failed = False
    for i, row in enumerate(ROWS):
        if not row.ours:
            continue
        ratios = [medians[col][i] / medians[col][0] for col in ("compiled", "source")]
        ok = max(ratios) <= args.target
        if not row.gated:
            print(
                f"INFO {row.name}: {ratios[0]:.2f}x compiled, {ratios[1]:.2f}x source (not an operator: not gated)"
            )
            continue
        failed |= not ok
        print(
            f"{'PASS' if ok else 'FAIL'} {row.name}: {ratios[0]:.2f}x compiled, {ratios[1]:.2f}x source "
            f"(target <= {args.target}x)"
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
