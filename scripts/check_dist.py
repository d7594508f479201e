"""`make dist`'s check: the built wheel and sdist, as a platform team would receive them.

1. Both distributions of each package (the provider and ``dws-emulator``) are in ``DIST`` and
   each carries its ``LICENSE``.
2. A new virtualenv outside the repository gets the two wheels (nothing editable), resolved with
   an Airflow release's constraint file (``constraints/airflow-3.3.txt`` by default, the stand-in
   for the constraints a user installs their Airflow with: never ``constraints.txt``, which pins
   the development tree).
3. From a directory where the repository is not importable, the provider reads the DWS page's
   price-table help from its own package, Airflow in that virtualenv finds the provider
   (``airflow providers get``), and the Vertex AI example DAG runs against a
   ``dws-emulator`` from the same wheels (``airflow dags test``) and reports a succeeded job.

    python scripts/check_dist.py dist [--constraints constraints/airflow-3.3.txt]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from demo import start_emulator  # scripts/, this script's folder, is on sys.path

ROOT = Path(__file__).resolve().parent.parent
UV = Path(sys.executable).parent / "uv"
PACKAGES = ("airflow_provider_dws", "dws_emulator")
EXAMPLE = ROOT / "example_dags" / "vertex_flex_start.py"


def check_archives(dist: Path) -> list[Path]:
    """The wheel and sdist of each package, each with its LICENSE; returns the wheels."""
    wheels = []
    for name in PACKAGES:
        found_wheels = sorted(dist.glob(f"{name}-*.whl"))
        sdists = sorted(dist.glob(f"{name}-*.tar.gz"))
        if len(found_wheels) != 1 or len(sdists) != 1:
            raise SystemExit(f"{dist}: want one wheel and one sdist of {name}, found {found_wheels + sdists}")
        with zipfile.ZipFile(found_wheels[0]) as wheel:
            if not any(
                n.endswith(".dist-info/licenses/LICENSE") or n.endswith(".dist-info/LICENSE")
                for n in wheel.namelist()
            ):
                raise SystemExit(f"{found_wheels[0].name} has no LICENSE")
        with tarfile.open(sdists[0]) as sdist:
            if not any(Path(n).name == "LICENSE" for n in sdist.getnames()):
                raise SystemExit(f"{sdists[0].name} has no LICENSE")
        print(f"ok  {found_wheels[0].name} and {sdists[0].name} carry LICENSE", flush=True)
        wheels.append(found_wheels[0])
    return wheels


def run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Run ``cmd``; on failure, print what it printed and stop."""
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]
    if done.returncode != 0:
        raise SystemExit(
            f"{' '.join(cmd[:4])} ... failed ({done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
        )
    return done


#: Run by the new virtualenv's Python: where the provider comes from, and the price-table help the
#: DWS page links to (package data: it must come with the wheel, not the checkout).
PROBE = (
    "import airflow_provider_dws as p; from airflow_provider_dws.plugins.web import views; "
    "print(p.__file__); print(views.price_help())"
)


def install(wheels: list[Path], constraints: Path, python: str, work: Path) -> dict[str, str]:
    """A new virtualenv in ``work/venv`` with the wheels; the environment that uses it."""
    venv = work / "venv"
    run([str(UV), "venv", "-q", "--python", python, str(venv)])
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["VIRTUAL_ENV"] = str(venv)
    run([str(UV), "pip", "install", "-q", *map(str, wheels), "-c", str(constraints)], env=env, cwd=work)
    where, help_text = run([str(venv / "bin" / "python"), "-c", PROBE], env=env, cwd=work).stdout.split(
        "\n", 1
    )
    if not where.startswith(str(venv)):
        raise SystemExit(f"the provider was imported from {where}, not from the new virtualenv")
    print(f"ok  installed in a new virtualenv ({where})", flush=True)
    if "dws_prices" not in help_text:
        raise SystemExit("the wheel's price-table help (plugins/web/price_table.md) is missing or empty")
    print("ok  the DWS page's price-table help is in the wheel", flush=True)
    return env


def json_line(text: str) -> Any:
    """The JSON document an ``airflow ... -o json`` command printed on a line of its own (log lines,
    some of which begin with a bracket too, may come before it)."""
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            return json.loads(line)
    raise SystemExit(f"no JSON line in:\n{text[-2000:]}")


def run_example(bin_dir: Path, env: dict[str, str], work: Path) -> str:
    """Run the Vertex AI example with ``airflow dags test`` against the wheel's emulator; its result line."""
    dags = work / "dags"
    dags.mkdir()
    shutil.copy(EXAMPLE, dags / EXAMPLE.name)
    env = dict(
        env,
        AIRFLOW_HOME=str(work / "airflow"),
        AIRFLOW__CORE__DAGS_FOLDER=str(dags),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        DWS_EXAMPLE_POLL_INTERVAL="1",
    )
    got = run(
        [str(bin_dir / "airflow"), "providers", "get", "airflow-provider-dws", "-o", "json"],
        env=env,
        cwd=work,
    )
    info = json_line(got.stdout)[0]
    print(f"ok  Airflow finds the provider: {info['Provider']} {info['Version']}", flush=True)
    with open(work / "emulator.log", "w") as emulator_log:
        emulator, address = start_emulator(bin_dir, stderr=emulator_log, env=env, cwd=work)
    try:
        env["DWS_EMULATOR_HOST"] = address
        run([str(bin_dir / "airflow"), "db", "migrate"], env=env, cwd=work)
        test = run([str(bin_dir / "airflow"), "dags", "test", "dws_vertex_flex_start"], env=env, cwd=work)
    finally:
        emulator.terminate()
        emulator.wait(timeout=10)
    result = [line for line in (test.stdout + test.stderr).splitlines() if "DWS RESULT:" in line]
    if not result or "JOB_STATE_SUCCEEDED" not in result[-1]:
        log = (work / "emulator.log").read_text()[-3000:]
        raise SystemExit(
            f"the example did not report a succeeded job:\n{test.stdout[-4000:]}\n{test.stderr[-4000:]}\n"
            f"emulator log:\n{log}"
        )
    return result[-1].split("DWS RESULT: ", 1)[1]


def check_install(wheels: list[Path], constraints: Path, python: str) -> None:
    """Install the wheels in a new virtualenv and run the example DAG with it."""
    with tempfile.TemporaryDirectory(prefix="dws-dist-check-") as tmp:
        work = Path(tmp)
        env = install(wheels, constraints, python, work)
        result = run_example(work / "venv" / "bin", env, work)
        print(f"ok  the example ran against the wheel's emulator: {result}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("dist", type=Path, help="the directory `make dist` built into")
    parser.add_argument(
        "--constraints",
        type=Path,
        default=ROOT / "constraints" / "airflow-3.3.txt",
        help="the Airflow release's constraint file to install with (default: %(default)s)",
    )
    parser.add_argument("--python", default=sys.executable, help="the new virtualenv's interpreter")
    args = parser.parse_args(argv)
    wheels = check_archives(args.dist.resolve())
    check_install(wheels, args.constraints.resolve(), args.python)
    return 0


if __name__ == "__main__":
    sys.exit(main())
