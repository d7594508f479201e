"""The import rule: parsing a DAG file that uses the provider imports no client library.

The dag-processor imports, once in its parent, only the ``airflow.*`` modules a DAG file names;
every parse is a forked child that imports the rest. So whatever a provider module imports at
module level is paid at every parse of every DAG file using it. The test imports every module of
the provider and every example DAG file the way
Airflow loads it, in a fresh interpreter, and checks that none of the heavy client libraries got
imported beyond what ``import airflow.sdk`` (the dag-processor parent) already had.

On failure it prints, per offending library, the chain of imports that brought it in (each link
``module (file:line)``) and every statement of the provider or an example DAG that imported a
forbidden module, so the fix is a known line.

The one exception is an example whose workload runs on cncf-kubernetes' own operators
(:data:`WORKLOAD_DAGS`): importing ``KubernetesJobOperator`` imports the ``kubernetes`` client (and,
through its kubeconfig loader, ``google.auth``) at parse time, whoever uses it. Those files are
loaded last, on their own: what they add is reported apart, must come from the file's own import
statements, and may only be those libraries; the provider's modules must add nothing there either.

Run this file as a script to see the same report: ``python tests/unit/test_import_rule.py``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # run as a script, the file imports nothing of the tests
    from tests.probe import Probe

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "airflow_provider_dws"
EXCLUDED: tuple[str, ...] = ()
EXAMPLE_DAGS = ROOT / "example_dags"
# What no provider module nor example DAG may import: a module of these or any
# of its submodules.
FORBIDDEN = (
    "google.cloud",
    "google.api_core",
    "google.auth",
    "google.protobuf",
    "grpc",
    "airflow.providers.google",
    "kubernetes",
    "dws_emulator",
)


#: Example DAGs whose workload task is a cncf-kubernetes operator, and what that import may bring.
WORKLOAD_DAGS = ("gke_provisioning_request.py",)
WORKLOAD_ALLOWED = ("kubernetes", "google.auth")


def _group(name: str) -> str | None:
    """The FORBIDDEN entry ``name`` falls under, if any."""
    for prefix in FORBIDDEN:
        if name == prefix or name.startswith(prefix + "."):
            return prefix
    return None


def _probe() -> dict:
    """Import everything in this interpreter; return what got imported and who imported it."""
    import builtins
    import importlib
    import importlib.util
    import pkgutil

    importlib_dir = os.path.dirname(importlib.__file__)
    this_file = os.path.abspath(__file__)

    def stack() -> list[tuple[str, str, int, str]]:
        """The frames that led to this import, innermost first, outside the import machinery."""
        frames = []
        frame = sys._getframe(2)
        while frame is not None:
            filename = frame.f_code.co_filename
            if os.path.abspath(filename) == this_file:
                if frame.f_code.co_name not in ("find_spec", "recording_import"):
                    break  # the probe itself: the chain starts here
            elif not (filename.startswith("<frozen importlib") or os.path.dirname(filename) == importlib_dir):
                name = frame.f_globals.get("__name__", "?")
                frames.append((name, filename, frame.f_lineno, frame.f_code.co_name))
            frame = frame.f_back
        return frames

    # How every module came to be imported: the call stack when a meta-path finder first saw it
    # (before it loads; later imports of a loaded module do not reach the finder).
    importer: dict[str, list[tuple[str, str, int, str]]] = {}
    order: dict[str, int] = {}

    class Recorder:
        @staticmethod
        def find_spec(fullname: str, path: object = None, target: object = None) -> None:
            if fullname not in importer:
                importer[fullname] = stack()
                order[fullname] = len(order)
            return None

    # Every import statement the provider or an example DAG runs, also of modules already loaded.
    statements: list[tuple[str, str, int, str, str]] = []
    real_import = builtins.__import__

    def is_ours(module: str, filename: str) -> bool:
        in_package = module == PACKAGE or module.startswith(PACKAGE + ".")
        if in_package and not any(module == e or module.startswith(e + ".") for e in EXCLUDED):
            return True
        return os.path.dirname(os.path.abspath(filename)) == str(EXAMPLE_DAGS)

    def recording_import(name, globals=None, locals=None, fromlist=(), level=0):  # type: ignore[no-untyped-def]
        frame = sys._getframe(1)
        module = frame.f_globals.get("__name__", "?")
        if is_ours(module, frame.f_code.co_filename):
            target = name
            if level:
                target = importlib.util.resolve_name("." * level + name, frame.f_globals.get("__package__"))
            targets = [target] + [f"{target}.{item}" for item in fromlist or () if item != "*"]
            for full in targets:
                if _group(full):
                    statements.append(
                        (full, module, frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
                    )
                    break
        return real_import(name, globals, locals, fromlist, level)

    sys.meta_path.insert(0, Recorder)  # type: ignore[arg-type]

    # The dag-processor's parent: airflow.sdk is what every DAG file names.
    import airflow.sdk

    # And `@task`, which the examples use: on Airflow 3.0 it looks the decorator up among every
    # installed provider's (``ProvidersManager().taskflow_decorators``), importing each provider's
    # package and metadata, apache-airflow-providers-google's among them, whatever the DAG holds.
    def _baseline_task() -> None:
        """A TaskFlow function, only decorated."""

    airflow.sdk.task(_baseline_task)

    baseline = sorted(m for m in sys.modules if _group(m))
    builtins.__import__ = recording_import
    failed: list[str] = []

    def walk(package_name: str) -> None:
        package = importlib.import_module(package_name)
        for info in pkgutil.iter_modules(package.__path__, package_name + "."):
            if any(info.name == e or info.name.startswith(e + ".") for e in EXCLUDED):
                continue
            try:
                importlib.import_module(info.name)
            except Exception as exc:
                failed.append(f"{info.name}: {exc!r}")
                continue
            if info.ispkg:
                walk(info.name)

    walk(PACKAGE)
    dags = []

    def load(path: Path) -> None:
        # As Airflow's DagBag loads a DAG file: a module of its own name, executed from the file.
        spec = importlib.util.spec_from_file_location(f"unusual_prefix_example_{path.stem}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            failed.append(f"{path.name}: {exc!r}")
        else:
            dags.append(path.name)

    every = sorted(EXAMPLE_DAGS.glob("*.py"))
    for path in every:
        if path.name not in WORKLOAD_DAGS:
            load(path)
    offenders = [m for m in sys.modules if _group(m) and m not in baseline]
    own_statements = list(statements)
    # Then the examples with a cncf-kubernetes workload, each on top of everything else.
    before_workload = set(sys.modules)
    for path in every:
        if path.name in WORKLOAD_DAGS:
            load(path)
    builtins.__import__ = real_import
    workload_statements = statements[len(own_statements) :]
    workload_modules = [m for m in sys.modules if _group(m) and m not in before_workload]

    def chains_of(modules: list[str]) -> dict[str, list[str]]:
        """Per FORBIDDEN entry, its first module and the call stack that imported it."""
        chains: dict[str, list[str]] = {}
        for name in sorted(modules, key=lambda m: order.get(m, -1)):
            group = _group(name)
            if group is None or group in chains:
                continue
            chain = [name] if name in importer else [name, "<- loaded before the probe began (site start-up)"]
            for module, filename, line, function in importer.get(name, []):
                where = f"{_short(filename)}:{line}" + ("" if function == "<module>" else f" in {function}()")
                chain.append(f"<- {module} ({where})")
            chains[group] = chain
        return chains

    def described(found: list[tuple[str, str, str, int, str]]) -> list[dict[str, str]]:
        return [
            {"imports": full, "by": module, "where": f"{_short(filename)}:{line}", "in": function}
            for full, module, filename, line, function in found
        ]

    return {
        "imported": sorted(m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")),
        "dags": dags,
        "baseline": baseline,
        "baseline_chains": chains_of(baseline),
        "offenders": offenders,
        "chains": chains_of(offenders),
        "statements": described(own_statements),
        "workload_groups": sorted({g for m in workload_modules if (g := _group(m))}),
        "workload_module_count": len(workload_modules),
        "workload_statements": described(workload_statements),
        "failed": failed,
    }


def _short(filename: str) -> str:
    """A path relative to the repository or to site-packages, to keep the report readable."""
    path = os.path.abspath(filename)
    if path.startswith(str(ROOT) + os.sep):
        return os.path.relpath(path, ROOT)
    marker = os.sep + "site-packages" + os.sep
    return path.split(marker, 1)[1] if marker in path else path


def report(result: dict, verbose: bool = False) -> str:
    """The probe's findings in words: one block per library, then the provider's own lines."""
    lines = []
    for group, chain in result["chains"].items():
        count = sum(1 for m in result["offenders"] if _group(m) == group)
        lines.append(f"{group}: {count} module(s) imported; first through:")
        lines.extend(f"    {link}" for link in chain)
    if result["statements"]:
        lines.append("import statements of the provider and example DAGs that import a forbidden module:")
        for s in result["statements"]:
            scope = "module level" if s["in"] == "<module>" else f"in {s['in']}()"
            lines.append(f"    {s['where']} ({scope}): {s['imports']}")
    if result.get("workload_groups"):
        lines.append(
            f"examples with a cncf-kubernetes workload ({', '.join(WORKLOAD_DAGS)}) add "
            f"{result['workload_module_count']} module(s) of {', '.join(result['workload_groups'])}, through:"
        )
        lines.extend(f"    {s['where']}: {s['imports']}" for s in result["workload_statements"])
    if result["failed"]:
        lines.append("modules that failed to import:")
        lines.extend(f"    {f}" for f in result["failed"])
    if result["baseline"] and (lines or verbose):
        lines.append(f"not counted, already imported by airflow.sdk: {', '.join(result['baseline'])}")
        if verbose:
            for chain in result["baseline_chains"].values():
                lines.extend(f"    {link}" for link in chain)
    return "\n".join(lines)


def _run_probe(airflow_home: Path, probe: Probe) -> dict:
    env = dict(os.environ)
    env["AIRFLOW_HOME"] = str(airflow_home)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    done = probe.run(path=__file__, args=["--json"], cwd=ROOT, env=env)
    assert done.returncode == 0, f"probe failed:\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout.splitlines()[-1])


def test_parsing_imports_no_client_library(tmp_path: Path, probe: Probe) -> None:
    result = _run_probe(tmp_path, probe)
    assert not result["failed"], report(result)
    # The walk reached the modules DAG files use, and every example DAG was loaded.
    assert {f"{PACKAGE}.operators.vertex_ai", f"{PACKAGE}.operators.tpu"} <= set(result["imported"])
    assert len(result["dags"]) == len(list(EXAMPLE_DAGS.glob("*.py"))) >= 3
    assert result["offenders"] == [] and result["statements"] == [], "\n" + report(result)
    # The cncf-kubernetes workload examples: only their own statements, only the client's libraries.
    assert set(result["workload_groups"]) <= set(WORKLOAD_ALLOWED), "\n" + report(result)
    by = {s["by"] for s in result["workload_statements"]}
    assert by <= {f"unusual_prefix_example_{Path(name).stem}" for name in WORKLOAD_DAGS}, report(result)


def test_the_probe_sees_a_forbidden_import(tmp_path: Path, probe: Probe) -> None:
    """The recorder works: a module-level client import in an example-DAG-like file is reported."""
    # Run the same probe machinery on a package-less file that imports grpc, through a DAG folder
    # of its own: the probe reads EXAMPLE_DAGS from the environment for this.
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "bad.py").write_text("import grpc  # noqa: F401\n")
    env = dict(os.environ)
    env["AIRFLOW_HOME"] = str(tmp_path)
    env["DWS_IMPORT_RULE_DAGS"] = str(dags)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    done = probe.run(path=__file__, args=["--json", "--dags-only"], cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["chains"]["grpc"][:2] == ["grpc", f"<- unusual_prefix_example_bad ({dags / 'bad.py'}:1)"]
    assert "grpc" in result["offenders"]
    assert [s["where"] for s in result["statements"]] == [f"{dags / 'bad.py'}:1"]


if __name__ == "__main__":
    sys.path.pop(0)  # this file's folder, which the tests do not have on the path either
    if os.environ.get("DWS_IMPORT_RULE_DAGS"):
        EXAMPLE_DAGS = Path(os.environ["DWS_IMPORT_RULE_DAGS"]).resolve()
    if "--dags-only" in sys.argv:
        EXCLUDED = (PACKAGE,)
    outcome = _probe()
    if "--json" in sys.argv:
        print(json.dumps(outcome))
    else:
        bad = bool(outcome["offenders"] or outcome["statements"] or outcome["failed"])
        print(("" if bad else "no forbidden import\n") + report(outcome, verbose=True))
        sys.exit(1 if bad else 0)
