"""The greener choice: each Google Cloud region's grid carbon intensity, accelerator board power,
and the emissions arithmetic over :class:`~airflow_provider_dws.records.RequestRecord` hours.

Pure data and arithmetic; the only Airflow access is :func:`load_carbon`, which imports Airflow
inside the call, as :func:`airflow_provider_dws.savings.load_prices` does. A figure the table lacks
gives ``None``, never a guess. See ``docs/carbon.md`` for the figures, the formula and their limits.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from airflow_provider_dws import forecast, savings
from airflow_provider_dws.records import ON_BLOCK_PRICING, RequestRecord, parse_time

#: The Airflow Variable holding an override as JSON (see :func:`parse_override`).
VARIABLE_KEY = "dws_carbon"
#: The Airflow config section holding an override as flat keys (``regions.us-central1.intensity``).
CONFIG_SECTION = "dws_carbon"
VARIABLE_SOURCE = f"Airflow Variable {VARIABLE_KEY}"
CONFIG_SOURCE = f"config section [{CONFIG_SECTION}]"

#: The year of the shipped region figures.
YEAR = 2024
#: Where the shipped region figures come from.
SOURCE = (
    "Google Cloud region carbon data, 2024: "
    "https://github.com/GoogleCloudPlatform/region-carbon-info, data/yearly/2024.csv "
    "(described at https://cloud.google.com/sustainability/region-carbon)"
)

# Region -> (Google CFE as a fraction, grid carbon intensity in gCO2eq/kWh), every row of the
# source's 2024 file as published (the comment is the file's location column).
_REGIONS: dict[str, tuple[float, float]] = {
    "africa-south1": (0.15, 656.85),  # Johannesburg
    "asia-east1": (0.17, 439.29),  # Taiwan
    "asia-east2": (0.01, 505.02),  # Hong Kong
    "asia-northeast1": (0.17, 452.85),  # Tokyo
    "asia-northeast2": (0.46, 296.19),  # Osaka
    "asia-northeast3": (0.37, 356.57),  # Seoul
    "asia-south1": (0.09, 678.76),  # Mumbai
    "asia-south2": (0.29, 531.83),  # Delhi
    "asia-southeast1": (0.04, 366.85),  # Singapore
    "asia-southeast2": (0.18, 560.55),  # Jakarta
    "australia-southeast1": (0.34, 497.50),  # Sydney
    "australia-southeast2": (0.39, 454.37),  # Melbourne
    "europe-central2": (0.40, 642.88),  # Warsaw
    "europe-north1": (0.98, 39.32),  # Finland
    "europe-north2": (1.00, 2.73),  # Stockholm
    "europe-southwest1": (0.87, 89.04),  # Madrid
    "europe-west1": (0.84, 103.37),  # Belgium
    "europe-west2": (0.79, 105.94),  # London
    "europe-west3": (0.68, 275.82),  # Frankfurt
    "europe-west4": (0.83, 208.81),  # Eemshaven
    "europe-west6": (0.98, 15.05),  # Zurich
    "europe-west8": (0.73, 201.69),  # Milan
    "europe-west9": (0.96, 16.30),  # Paris
    "europe-west10": (0.68, 275.82),  # Berlin
    "europe-west12": (0.73, 201.69),  # Turin
    "me-central1": (0.01, 366.0),  # Doha
    "me-central2": (0.01, 382.23),  # Dammam
    "me-west1": (0.07, 433.75),  # Tel Aviv
    "northamerica-northeast1": (0.99, 5.48),  # Montreal
    "northamerica-northeast2": (0.84, 58.56),  # Toronto
    "northamerica-south1": (0.19, 305.00),  # Mexico
    "southamerica-east1": (0.88, 67.32),  # Sao Paulo
    "southamerica-west1": (0.92, 238.00),  # Santiago
    "us-central1": (0.87, 412.72),  # Iowa
    "us-central2": (0.88, 372.23),  # Oklahoma
    "us-east1": (0.31, 575.77),  # South Carolina
    "us-east2": (0.42, 340.42),  # Georgia
    "us-east4": (0.62, 323.05),  # Northern Virginia
    "us-east5": (0.62, 323.05),  # Columbus
    "us-south1": (0.94, 302.95),  # Dallas
    "us-west1": (0.87, 79.23),  # Oregon
    "us-west2": (0.63, 169.28),  # Los Angeles
    "us-west3": (0.33, 555.17),  # Salt Lake City
    "us-west4": (0.64, 357.30),  # Las Vegas
}

# GPU (Vertex AI's name; Compute Engine's "nvidia-h100-80gb" matches through savings.type_key) ->
# (maximum board power in W, the datasheet). Left out, for want of a per-GPU figure to cite: the
# GB200 (NVIDIA publishes it per superchip or rack), the K80 (per two-GPU board; retired from
# Google Cloud) and every TPU (no official per-chip power). An override can add them.
_H100 = "NVIDIA H100 Tensor Core GPU datasheet (H100 SXM: max TDP up to 700 W)"
_A100 = "NVIDIA A100 Tensor Core GPU datasheet (A100 SXM: max TDP 400 W)"
_POWER: dict[str, tuple[float, str]] = {
    "NVIDIA_B200": (1000.0, "NVIDIA Blackwell datasheet (HGX B200: up to 1,000 W per GPU)"),
    "NVIDIA_H200_141GB": (700.0, "NVIDIA H200 Tensor Core GPU datasheet (H200 SXM: max TDP up to 700 W)"),
    "NVIDIA_H100_MEGA_80GB": (700.0, _H100),
    "NVIDIA_H100_80GB": (700.0, _H100),
    "NVIDIA_A100_80GB": (400.0, _A100),
    "NVIDIA_TESLA_A100": (400.0, _A100),
    "NVIDIA_RTX_PRO_6000": (
        600.0,
        "NVIDIA RTX PRO 6000 Blackwell Server Edition datasheet (max power up to 600 W, configurable)",
    ),
    "NVIDIA_L4": (72.0, "NVIDIA L4 Tensor Core GPU datasheet (max TDP 72 W)"),
    "NVIDIA_TESLA_T4": (70.0, "NVIDIA T4 Tensor Core GPU datasheet (max power 70 W)"),
    "NVIDIA_TESLA_V100": (300.0, "NVIDIA Tesla V100 datasheet (V100 SXM2: max power 300 W)"),
    # Google Cloud's P100 is the PCIe card (the SXM2 module is rated 300 W).
    "NVIDIA_TESLA_P100": (250.0, "NVIDIA Tesla P100 datasheet (P100 PCIe: max power 250 W)"),
    "NVIDIA_TESLA_P4": (75.0, "NVIDIA Tesla P4 datasheet (max power 75 W, configurable down to 50 W)"),
}
#: Each shipped GPU's datasheet, by the name the table keys it by.
POWER_SOURCES: Mapping[str, str] = {name: source for name, (_, source) in _POWER.items()}

_REGION_NAME = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)+")
_TYPE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
# What each figure of an override must be, for the error that refuses one.
_EXPECTED = {
    "cfe": "a carbon-free share from 0 to 1 (93% is 0.93)",
    "intensity": "gCO2eq/kWh, a non-negative number",
    "power_watts": "watts, a non-negative number",
}


@dataclass(frozen=True)
class RegionCarbon:
    """One region's figures: ``cfe`` the carbon-free energy share (0..1), ``intensity`` the grid's
    gCO2eq/kWh; either may be ``None`` for a region an override named with one figure only."""

    cfe: float | None
    intensity: float | None


@dataclass(frozen=True)
class CarbonTable:
    """Region figures and board power (W) per accelerator type, with where they came from.

    ``source`` names every source in the table (an override's, with its year, before the shipped
    one); ``year`` is the shipped figures' year, ``override_year`` the year an override gave. ``error``
    says why an override was refused (the table is then the shipped one).
    """

    regions: Mapping[str, RegionCarbon]
    power: Mapping[str, float]
    source: str
    year: int
    error: str | None = None
    power_sources: Mapping[str, str] = field(default_factory=dict)
    override_year: int | None = None
    _index: dict[str, float] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {savings.type_key(t): float(w) for t, w in self.power.items()})

    def region(self, location: str | None) -> RegionCarbon | None:
        """The figures of ``location``'s region: a zone ``us-central1-a`` reads ``us-central1``."""
        if not isinstance(location, str):
            return None
        name = location.strip().lower()
        if name in self.regions:
            return self.regions[name]
        # A zone is its region plus one more hyphenated part; "us" alone is never a region.
        region, _, zone = name.rpartition("-")
        if zone and "-" in region:
            return self.regions.get(region)
        return None

    def intensity(self, location: str | None) -> float | None:
        """The grid carbon intensity (gCO2eq/kWh) of ``location``'s region; ``None`` when unknown."""
        found = self.region(location)
        return None if found is None else found.intensity

    def cfe(self, location: str | None) -> float | None:
        """Google's carbon-free energy share (0..1) of ``location``'s region; ``None`` when unknown."""
        found = self.region(location)
        return None if found is None else found.cfe

    def power_watts(self, accelerator_type: str | None) -> float | None:
        """Board power (W) of one accelerator of this type; ``None`` when the table has none."""
        if not isinstance(accelerator_type, str) or not accelerator_type.strip():
            return None
        # As the price table: a TPU type ``v5litepod-16`` falls back to its family ``v5litepod``.
        return next((self._index[k] for k in savings.type_keys(accelerator_type) if k in self._index), None)


#: The built-in table: every region of :data:`SOURCE` and the GPUs of :data:`POWER_SOURCES`.
SHIPPED = CarbonTable(
    regions={name: RegionCarbon(cfe, intensity) for name, (cfe, intensity) in _REGIONS.items()},
    power={name: watts for name, (watts, _) in _POWER.items()},
    source=SOURCE,
    year=YEAR,
    power_sources=POWER_SOURCES,
)


def _number(value: Any, entry: str, source: str, what: str) -> float:
    number = savings.table_number(value)
    if number is None or number < 0:
        raise ValueError(f"{source}: entry {entry!r}: expected {what}, got {value!r}")
    return number


def _flat(key: str) -> list[str]:
    # A config file's key uses dots; an environment variable's cannot, so it uses double underscores.
    return key.strip().split(".") if "." in key else key.strip().split("__")


def _entries(
    value: Mapping[Any, Any], prefix: tuple[str, ...], source: str
) -> Iterable[tuple[tuple[str, ...], Any]]:
    """(path, value) of every leaf, nested objects and flat keys alike: ``("regions", "us-central1",
    "cfe")``."""
    for key, item in value.items():
        if not isinstance(key, str) or not key.strip():
            raise ValueError(f"{source}: entry {'.'.join([*prefix, repr(key)])}: keys are names, got {key!r}")
        path = (*prefix, *_flat(key))
        if isinstance(item, Mapping):
            yield from _entries(item, path, source)
        else:
            yield path, item


def parse_override(value: Mapping[str, Any] | str, source: str) -> CarbonTable:
    """The shipped table with an override merged over it; raises ``ValueError`` naming the bad entry.

    ``value`` is JSON text or a mapping: ``{"source": ..., "year": 2025, "regions": {"us-central1":
    {"cfe": 0.93, "intensity": 413}}, "power_watts": {"NVIDIA_H100_80GB": 700}}``, or the same as
    flat keys (``regions.us-central1.intensity``, ``power_watts.NVIDIA_H100_80GB``, or ``__`` in
    place of the dots). Each figure it names replaces the shipped one; the rest stay.
    """
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise ValueError(f"{source}: not valid JSON ({exc})") from None
    if not isinstance(value, Mapping):
        raise ValueError(f"{source}: the override must be a JSON object, got {type(value).__name__}")
    their_source = their_year = None
    regions: dict[str, dict[str, float]] = {}
    power: dict[str, tuple[str, float]] = {}  # type_key -> (name as given, watts)
    for path, item in _entries(value, (), source):
        entry = ".".join(path)
        head = path[0].lower()
        if head == "source" and len(path) == 1 and isinstance(item, str) and item.strip():
            their_source = item.strip()
        elif head == "year" and len(path) == 1:
            text = str(item).strip() if isinstance(item, (int, str)) and not isinstance(item, bool) else ""
            if not re.fullmatch(r"[12][0-9]{3}", text):
                raise ValueError(f"{source}: entry {entry!r}: expected a year such as 2025, got {item!r}")
            their_year = int(text)
        elif head == "regions" and len(path) == 3 and path[2].lower() in ("cfe", "intensity"):
            # Regions never hold an underscore; an environment variable's name cannot hold a hyphen.
            name, figure = path[1].lower().replace("_", "-"), path[2].lower()
            if not _REGION_NAME.fullmatch(name):
                raise ValueError(f"{source}: entry {entry!r}: expected a region such as us-central1")
            number = _number(item, entry, source, _EXPECTED[figure])
            if figure == "cfe" and number > 1:
                raise ValueError(f"{source}: entry {entry!r}: expected {_EXPECTED[figure]}, got {item!r}")
            if regions.get(name, {}).get(figure, number) != number:
                raise ValueError(f"{source}: entry {entry!r} gives another {figure} for a region named twice")
            regions.setdefault(name, {})[figure] = number
        elif head == "power_watts" and len(path) == 2:
            if not _TYPE_NAME.fullmatch(path[1]):
                raise ValueError(f"{source}: entry {entry!r}: expected an accelerator type such as NVIDIA_L4")
            number = _number(item, entry, source, _EXPECTED[head])
            key = savings.type_key(path[1])
            if power.get(key, (path[1], number))[1] != number:
                raise ValueError(f"{source}: entry {entry!r} gives another power for a type named twice")
            power[key] = (path[1], number)
        else:
            raise ValueError(
                f"{source}: entry {entry!r}: expected source (text), year, "
                f"regions.<region>.<cfe|intensity> or power_watts.<accelerator type>, got {item!r}"
            )

    merged_regions = dict(SHIPPED.regions)
    for name, figures in regions.items():
        old = merged_regions.get(name, RegionCarbon(None, None))
        merged_regions[name] = RegionCarbon(
            figures.get("cfe", old.cfe), figures.get("intensity", old.intensity)
        )
    label = f"{source}: {their_source or 'no source given'}" + (f", {their_year}" if their_year else "")
    merged_power = {t: w for t, w in SHIPPED.power.items() if savings.type_key(t) not in power}
    sources = {t: s for t, s in SHIPPED.power_sources.items() if t in merged_power}
    for name, watts in power.values():
        merged_power[name] = watts
        sources[name] = label
    return CarbonTable(
        regions=merged_regions,
        power=merged_power,
        source=f"{label}; the rest: {SHIPPED.source}",
        year=YEAR,
        power_sources=sources,
        override_year=their_year,
    )


def _read_variable() -> str | None:
    # The same reader as the price table's, so the Variable is found in the same places (the
    # api-server's chain, or the Task SDK's in a task).
    return savings.read_variable(VARIABLE_KEY)


def _normal_key(key: str) -> Hashable:
    return tuple(part.replace("-", "_") for part in _flat(key.strip().lower()))


def _read_config() -> dict[str, Any] | None:
    """The section's entries, the ``AIRFLOW__DWS_CARBON__<KEY>`` environment variables winning."""
    return savings.read_config_section(CONFIG_SECTION, _normal_key)


def load_carbon() -> CarbonTable:
    """The shipped table, with the Variable ``dws_carbon`` (JSON) merged over it if set, else the
    config section ``[dws_carbon]`` if set.

    Never raises: an override that cannot be read or is malformed gives the shipped table with
    ``error`` saying why (the page shows it).
    """
    return savings.load_table(
        read_variable=_read_variable,
        read_config=_read_config,
        parse=parse_override,
        refused=lambda _source, why: replace(SHIPPED, error=why),
        absent=SHIPPED,
        sources=(VARIABLE_SOURCE, CONFIG_SOURCE),
    )


#: The page's words for the emissions figures (docs/carbon.md says the same at length).
EMISSIONS_FORMULA = (
    "kg CO2e = accelerator-hours x board power (kW) x grid carbon intensity (gCO2eq/kWh) / 1000. "
    "Run: the accelerator-hours run. Idle avoided: the accelerator-hours waited by requests that got "
    "capacity, which holding the same accelerators through the wait would have spent idle. Left out: "
    "the host's CPUs, memory and network, the data centre's overhead (PUE), and the carbon-free "
    "energy Google buys in the region (the intensity is the grid's, location-based, an annual "
    "average). Board power is the accelerator's maximum and an idle accelerator draws less, so the "
    "idle avoided figure is an upper bound. No figure is guessed: a request whose accelerator power "
    "or region intensity is unknown is counted apart."
)


def kg_co2e(accelerator_hours: float, power_watts: float, intensity: float) -> float:
    """kg CO2e of ``accelerator_hours`` at ``power_watts`` each on a grid of ``intensity`` gCO2eq/kWh."""
    given = {"accelerator_hours": accelerator_hours, "power_watts": power_watts, "intensity": intensity}
    for name, number in given.items():
        if not math.isfinite(number) or number < 0:
            raise ValueError(f"{name} must be a non-negative number, got {number!r}")
    return accelerator_hours * (power_watts / 1000.0) * intensity / 1000.0


@dataclass(frozen=True)
class RequestEmissions:
    """One request's estimated emissions (see :data:`EMISSIONS_FORMULA`).

    ``run_kg`` and ``avoided_idle_kg`` are ``None`` when the power or the intensity is unknown;
    ``avoided_hours`` are the accelerator-hours waited by a request that got capacity (else 0).
    """

    location: str
    accelerator_type: str | None
    run_hours: float
    avoided_hours: float
    intensity: float | None
    cfe: float | None
    power_watts: float | None
    run_kg: float | None
    avoided_idle_kg: float | None

    @property
    def known(self) -> bool:
        """Both the accelerator's power and the region's intensity were known."""
        return self.run_kg is not None


def request_emissions(record: RequestRecord, table: CarbonTable, now: datetime) -> RequestEmissions:
    """The record's run and idle-avoided emissions at ``now``, from ``table``'s figures."""
    # The hours are savings' own (the same clamping to a block's or a task's end); no price needed.
    hours = savings.request_cost(record, savings.PriceTable({}, "none"), now)
    # As savings' "saved": only a request that got capacity avoided holding anything through its
    # wait, and only a wait for DWS capacity: a calendar block's time before its start is a date
    # the user chose, and work on a block waits for nothing.
    waits = forecast.group_of(record) is not None
    avoided_hours = hours.waited_hours if waits and parse_time(record.started) is not None else 0.0
    # Work on a calendar block runs on accelerators the block's own record counts as held.
    run_hours = 0.0 if record.pricing_model == ON_BLOCK_PRICING else hours.run_hours
    intensity = table.intensity(record.location)
    power = table.power_watts(record.accelerator_type)
    run_kg = avoided_kg = None
    if intensity is not None and power is not None:
        run_kg = kg_co2e(run_hours, power, intensity)
        avoided_kg = kg_co2e(avoided_hours, power, intensity)
    return RequestEmissions(
        location=record.location,
        accelerator_type=record.accelerator_type,
        run_hours=run_hours,
        avoided_hours=avoided_hours,
        intensity=intensity,
        cfe=table.cfe(record.location),
        power_watts=power,
        run_kg=run_kg,
        avoided_idle_kg=avoided_kg,
    )


def sum_emissions(items: Iterable[RequestEmissions]) -> dict[str, Any]:
    """Totals for the page: ``requests``, ``known``, ``unknown`` (power or intensity missing), and
    over the known ones ``run_hours``, ``avoided_hours``, ``run_kg``, ``avoided_idle_kg`` (the kg
    ``None`` when no request is known)."""
    listed = list(items)
    known = [e for e in listed if e.run_kg is not None and e.avoided_idle_kg is not None]
    return {
        "requests": len(listed),
        "known": len(known),
        "unknown": len(listed) - len(known),
        "run_hours": sum(e.run_hours for e in known),
        "avoided_hours": sum(e.avoided_hours for e in known),
        "run_kg": sum(e.run_kg or 0.0 for e in known) if known else None,
        "avoided_idle_kg": sum(e.avoided_idle_kg or 0.0 for e in known) if known else None,
    }


def order_by_intensity(locations: Sequence[str], table: CarbonTable) -> list[tuple[str, float | None]]:
    """``locations`` with their intensity, lowest first; unknown ones last; ties keep their order."""
    found = [(location, table.intensity(location)) for location in locations]
    return sorted(found, key=lambda pair: (pair[1] is None, pair[1] or 0.0))
