"""Provider metadata: everything it names exists, and Airflow can find it."""

from __future__ import annotations

import importlib
import importlib.metadata
import pkgutil
import types

import pytest
from airflow.sdk import BaseOperatorLink

import airflow_provider_dws
from airflow_provider_dws.get_provider_info import get_provider_info


def _modules(info: dict) -> list[str]:
    return [
        m
        for section in ("operators", "triggers", "hooks")
        for e in info[section]
        for m in e["python-modules"]
    ]


def test_every_listed_module_imports() -> None:
    modules = _modules(get_provider_info())
    assert "airflow_provider_dws.operators.vertex_ai" in modules
    assert "airflow_provider_dws.triggers.capacity_request" in modules
    for module in modules:
        importlib.import_module(module)


#: Provider info section -> (the subpackage it lists, the Airflow class its modules define).
SECTIONS = {
    "operators": ("airflow_provider_dws.operators", "airflow.sdk:BaseOperator"),
    "triggers": ("airflow_provider_dws.triggers", "airflow.triggers.base:BaseTrigger"),
    "hooks": ("airflow_provider_dws.hooks", "airflow.providers.common.compat.sdk:BaseHook"),
}


def _defining(package: str, base: type) -> set[str]:
    """The modules of ``package`` that define a subclass of ``base`` (not only import one)."""
    found = set()
    for info in pkgutil.iter_modules(importlib.import_module(package).__path__, package + "."):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            # Python 3.10 takes ``Callable[...]`` aliases for types: skip them before issubclass.
            if isinstance(value, type) and not isinstance(value, types.GenericAlias):
                if issubclass(value, base) and value.__module__ == info.name:
                    found.add(info.name)
    return found


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_provider_info_lists_every_module_that_defines_one(section: str) -> None:
    """Every operator, trigger and hook module is in the provider info, and only those."""
    package, base_path = SECTIONS[section]
    module_name, _, class_name = base_path.partition(":")
    base = getattr(importlib.import_module(module_name), class_name)
    listed = {m for entry in get_provider_info()[section] for m in entry["python-modules"]}
    defining = _defining(package, base)
    assert defining, f"no {class_name} found under {package}"
    assert defining - listed == set(), f"missing from provider info {section!r}"
    assert listed - defining == set(), f"listed in provider info {section!r} but defining no {class_name}"


def test_the_description_names_every_surface() -> None:
    description = get_provider_info()["description"]
    for surface in (
        "Vertex AI",
        "Cloud TPU",
        "Cloud Batch",
        "Compute Engine",
        "ProvisioningRequest",
        "Kueue",
        "calendar",
    ):
        assert surface in description, surface


def test_extra_links_resolve_to_operator_links() -> None:
    links = get_provider_info()["extra-links"]
    assert links
    for path in links:
        module, _, name = path.rpartition(".")
        cls = getattr(importlib.import_module(module), name)
        assert isinstance(cls, type) and issubclass(cls, BaseOperatorLink), path


def test_package_metadata() -> None:
    info = get_provider_info()
    assert info["package-name"] == "airflow-provider-dws"
    assert info["versions"] == [airflow_provider_dws.__version__]
    assert info["name"]
    assert info["description"]
    assert importlib.metadata.version("airflow-provider-dws") == airflow_provider_dws.__version__


def test_integrations_are_declared_for_every_section() -> None:
    info = get_provider_info()
    names = {i["integration-name"] for i in info["integrations"]}
    for section in ("operators", "triggers", "hooks"):
        for entry in info[section]:
            assert entry["integration-name"] in names


def test_entry_point_is_registered() -> None:
    eps = [
        ep
        for ep in importlib.metadata.entry_points(group="apache_airflow_provider")
        if ep.value.startswith("airflow_provider_dws")
    ]
    assert len(eps) == 1
    (ep,) = eps
    assert ep.value == "airflow_provider_dws.get_provider_info:get_provider_info"
    assert ep.load() is get_provider_info
    assert ep.load()()["package-name"] == "airflow-provider-dws"


def test_the_provider_info_is_valid_for_airflow() -> None:
    """What Airflow's providers manager checks the provider's metadata against."""
    import json
    from pathlib import Path

    import airflow
    import jsonschema

    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    jsonschema.validate(get_provider_info(), schema)


def test_the_log_heartbeat_option_is_declared_with_its_default() -> None:
    """``[dws] log_heartbeat`` is documented where Airflow users look (``airflow config list``)."""
    from airflow_provider_dws.triggers.status_line import CONFIG_SECTION, DEFAULT_HEARTBEAT, HEARTBEAT_OPTION

    option = get_provider_info()["config"][CONFIG_SECTION]["options"][HEARTBEAT_OPTION]
    assert float(option["default"]) == DEFAULT_HEARTBEAT.total_seconds()
    assert option["type"] == "integer"
