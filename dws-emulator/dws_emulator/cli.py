"""``dws-emulator`` command line: ``serve``, ``requests``, ``capacity``, ``preempt``, ``faults``, ``outage``, ``stats``.

::

    dws-emulator serve [--host 127.0.0.1] [--port 0] [--seed 0] [--capacity LOC/ACC=N ...]
                       [--faults SPEC ...] [--calendar-capacity ZONE/ACC=N ...]
                       [--calendar-approval-seconds S|manual] [--calendar-min-lead-seconds S]
                       [--calendar-provision-seconds S]
                       [--kube-node-pools [NAME=]ACCELERATOR ...] [--kube-booking-seconds S]
                       [--kube-flex-start-pools [NAME=]ACCELERATOR[:TOPOLOGY][@LOCATION] ...]
                       [--kueue-versions v1beta2,v1beta1|v1beta1]
    dws-emulator requests --port P [--host 127.0.0.1] [--json]
    dws-emulator capacity --port P [--host 127.0.0.1] [--json] [LOC/ACC=N ...]
    dws-emulator preempt --port P [--host 127.0.0.1] [--json] projects/P/locations/ZONE/queuedResources/ID
    dws-emulator faults --port P [--host 127.0.0.1] [--json] [--clear | [--add] [--seed N] SPEC ...]
    dws-emulator outage --port P [--host 127.0.0.1] [--json] SECONDS
    dws-emulator stats --port P [--host 127.0.0.1] [--json] [--reset]

Pools are ``LOCATION/ACCELERATOR=N``: a region and a Vertex accelerator for GPUs
(``us-central1/NVIDIA_H100_80GB=8``, used by Vertex AI and Cloud Batch jobs alike), a zone and a TPU family counted in chips for TPUs
(``us-west4-a/v5litepod=16``), or ``ZONE/FAMILY@RESERVATION=N`` for a TPU reservation.

Calendar mode (future reservations) books on its own calendar of free capacity,
``ZONE/ACCELERATOR=N`` units per day (``us-central1-a/NVIDIA_H100_80GB=64``, ``us-west4-a/v5litepod=256``);
``--calendar-*`` set its approval delay (``manual``: only the control API decides), minimum lead
time and provisioning delay, over the ``DWS_EMULATOR_CALENDAR_*`` environment variables.

The GKE cluster behind the Kubernetes API has one queued node pool per accelerator, named by its
GKE label value (``nvidia-h100-80gb``, optionally ``NAME=nvidia-h100-80gb``), whose GPUs come from
the ``us-central1`` pool of that GPU; ``--kube-node-pools`` replaces the default set and
``--kube-booking-seconds`` sets how long a Provisioned request waits for its pods (default 600);
``--kube-flex-start-pools`` replaces its flex-start node pools (``dws-flex-<accelerator>`` for the
same GPUs and ``tpu-v5-lite-podslice:2x4``; none when given no value);
``--kueue-versions v1beta1`` serves Kueue's objects only at ``v1beta1``, as a Kueue before 0.15 does.

Fault rules are ``METHOD=EFFECT[@RATE][xCOUNT][+FROM][..UNTIL]`` (``GetCustomJob=UNAVAILABLE@0.2``,
``*=latency:0.3``; see :mod:`.core.faults`). ``faults`` without rules shows the rules and what was
injected; with rules it replaces them (``--add`` appends). ``outage`` returns at once.
``stats`` shows how many calls each emulated method received since the last reset; ``--reset``
shows them and zeroes the counters in the same step.

``serve`` prints exactly one line, ``dws-emulator listening on HOST:PORT``, to stdout once it
accepts connections (gRPC on PORT, the REST front for Compute Engine on PORT + 1, logged to
stderr), logs request state changes to stderr, and stops on SIGTERM / SIGINT.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import logging
import signal
import sys
import threading
import types
from collections.abc import Iterator, Sequence
from typing import Any

import grpc

from .control import EmulatorControl
from .core.capacity import parse_pool_spec
from .core.faults import FaultRule, FaultSpecError, parse_specs
from .process import LISTENING


@contextlib.contextmanager
def _without_aiplatform_services() -> Iterator[None]:
    """Import only the ``types`` of ``google.cloud.aiplatform_v1`` (and ``v1beta1``), ``tpu_v2``,
    ``batch_v1`` and ``compute_v1``.

    Each package ``__init__`` imports every service client (~5 s and ~2 s); the emulator needs only
    the message types. Placeholder parent modules are installed for the import and removed
    afterwards, so a later ``import google.cloud.aiplatform_v1`` still runs the real one.
    """
    with (
        _types_only("google.cloud.aiplatform_v1"),
        _types_only("google.cloud.aiplatform_v1beta1"),
        _types_only("google.cloud.tpu_v2"),
        _types_only("google.cloud.batch_v1"),
        _types_only("google.cloud.compute_v1"),
    ):
        yield


@contextlib.contextmanager
def _types_only(name: str) -> Iterator[None]:
    spec = importlib.util.find_spec(name) if name not in sys.modules else None
    if spec is None or spec.submodule_search_locations is None:
        yield
        return
    placeholder = types.ModuleType(name)
    placeholder.__path__ = list(spec.submodule_search_locations)
    placeholder.__spec__ = spec
    sys.modules[name] = placeholder
    try:
        yield
    finally:
        if sys.modules.get(name) is placeholder:
            del sys.modules[name]
        parent = sys.modules.get("google.cloud")
        attr = name.rsplit(".", 1)[1]
        if parent is not None and getattr(parent, attr, None) is placeholder:
            delattr(parent, attr)


def _parse_pools(specs: Sequence[str]) -> dict[str, int]:
    pools: dict[str, int] = {}
    for spec in specs:
        key, count = parse_pool_spec(spec)
        pools[str(key)] = count
    return pools


def _serve(args: argparse.Namespace) -> int:
    with _without_aiplatform_services():
        from .server import EmulatorServer, is_loopback

    if not is_loopback(args.host):
        print(
            f"dws-emulator: refusing to bind to {args.host!r}: the emulator has no authentication and "
            "only binds to loopback (127.0.0.1, ::1 or localhost).",
            file=sys.stderr,
        )
        return 2
    try:
        capacity = None if args.capacity is None else _parse_pools(args.capacity)
        calendar = None if args.calendar_capacity is None else _parse_pools(args.calendar_capacity)
        faults = parse_specs(args.faults or ())
    except ValueError as exc:
        print(f"dws-emulator: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s dws-emulator %(message)s")
    try:
        server = EmulatorServer(
            capacity,
            seed=args.seed,
            host=args.host,
            port=args.port,
            faults=faults,
            calendar_capacity=calendar,
        )
    except ValueError as exc:  # a DWS_EMULATOR_CALENDAR_* variable that does not parse
        print(f"dws-emulator: {exc}", file=sys.stderr)
        return 2
    settings = server.state.calendar.settings
    if args.calendar_approval_seconds is not None:
        manual = args.calendar_approval_seconds == "manual"
        settings.approval_seconds = None if manual else float(args.calendar_approval_seconds)
    if args.calendar_min_lead_seconds is not None:
        settings.min_lead_seconds = args.calendar_min_lead_seconds
    if args.calendar_provision_seconds is not None:
        settings.provision_seconds = args.calendar_provision_seconds
    kube = server.state.apis.get("kube")
    if kube is not None:
        cluster = kube.cluster  # type: ignore[attr-defined]
        if args.kube_node_pools is not None:
            cluster.set_node_pools(args.kube_node_pools, replace=True)
        if args.kube_booking_seconds is not None:
            cluster.booking_seconds = args.kube_booking_seconds
        if args.kube_flex_start_pools is not None:
            cluster.set_flex_start_pools(args.kube_flex_start_pools, replace=True)
        if args.kueue_versions is not None:
            cluster.kueue_versions = tuple(args.kueue_versions.split(","))
    try:
        server.start()
    except OSError as exc:  # the port, or the REST front's port + 1, is taken
        print(f"dws-emulator: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    inventory = ", ".join(f"{k}={v['total']}" for k, v in server.state.inventory().items())
    logging.getLogger("dws_emulator").info("seed=%d capacity: %s", args.seed, inventory or "(none)")
    if faults:
        logging.getLogger("dws_emulator").info("faults: %s", ", ".join(rule.spec for rule in faults))
    logging.getLogger("dws_emulator").info("REST front (Compute Engine) at %s", server.rest_url)
    logging.getLogger("dws_emulator").info(
        "calendar mode: %s; capacity per day: %s",
        ", ".join(f"{k}={v}" for k, v in settings.to_json().items()),
        ", ".join(f"{k}={v}" for k, v in server.state.calendar.calendar.snapshot()["pools"].items())
        or "(none)",
    )
    print(f"{LISTENING}{server.address}", flush=True)
    while not stop.wait(0.5):
        pass
    logging.getLogger("dws_emulator").info("shutting down")
    server.stop(grace=1.0)
    return 0


def _address(args: argparse.Namespace) -> str:
    host = f"[{args.host}]" if ":" in args.host else args.host
    return f"{host}:{args.port}"


def _format_table(rows: list[list[str]], headers: list[str]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows, strict=False)]
    lines = [
        "  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=False)).rstrip()
        for row in [headers, *rows]
    ]
    return "\n".join(lines)


def _qr_row(r: dict[str, Any]) -> list[str]:
    """A QueuedResource record in the same columns as a CustomJob (tier as strategy)."""
    slices = f"{r['node_count']} x " if r["node_count"] > 1 else ""
    accel = f"{slices}{r['accelerator_type']} ({r['chips']} chips)"
    state = r["state"] + (" (deleted)" if r["deleted"] else "")
    labels = ",".join(f"{k}={v}" for k, v in sorted(r["labels"].items())) or "-"
    tier = r["tier"] + (f"@{r['reservation'].rsplit('/', 1)[-1]}" if r["reservation"] else "")
    return [r["name"].rsplit("/", 1)[-1], "-", r["location"], tier, accel, state, labels]


def _print_requests(requests: list[dict[str, Any]]) -> None:
    if not requests:
        print("no requests")
        return
    rows = []
    for r in requests:
        if r["kind"] == "QueuedResource":
            rows.append(_qr_row(r))
            continue
        accel = f"{r['accelerator_count']} x {r['accelerator_type']}" if r["accelerator_type"] else "-"
        state = r["state"].removeprefix("JOB_STATE_") + (" (deleted)" if r["deleted"] else "")
        labels = ",".join(f"{k}={v}" for k, v in sorted(r["labels"].items())) or "-"
        rows.append(
            [
                r["name"].rsplit("/", 1)[-1],
                r["display_name"],
                r["location"],
                r["strategy"],
                accel,
                state,
                labels,
            ]
        )
    print(
        _format_table(rows, ["ID", "DISPLAY_NAME", "LOCATION", "STRATEGY", "ACCELERATORS", "STATE", "LABELS"])
    )
    for r in requests:
        history = " -> ".join(f"{h['state'].removeprefix('JOB_STATE_')}@{h['time']}" for h in r["history"])
        print(f"\n{r['kind']} {r['name']}\n  history: {history}")
        if r.get("nodes"):
            print(f"  nodes: {', '.join(r['nodes'])}")
        if r["kind"] == "FutureReservation":
            print(f"  block: {r['block_start']} -> {r['block_end']}")
            if r["reservation"]:
                print(f"  reservation: {r['reservation']}{'' if r['reservation_live'] else ' (not live)'}")
            if r["consumers"]:
                consumers = ", ".join(f"{c['kind']} {c['name']}" for c in r["consumers"])
                print(f"  consumers: {consumers}")
        if r.get("instances"):
            vms = (
                f"{vm['name']} ({vm['zone']}, {vm['internal_ip']}{', deleted' if vm['deleted'] else ''})"
                for vm in r["instances"]
            )
            print(f"  instances: {', '.join(vms)}")
        if r["error"]:
            print(f"  error: code={r['error']['code']} {r['error']['message']}")


def _print_capacity(pools: dict[str, dict[str, int]]) -> None:
    rows = [
        [k, str(v["total"]), str(v["in_use"]), str(v["free"]), str(v["queued"])] for k, v in pools.items()
    ]
    print(_format_table(rows, ["POOL", "TOTAL", "IN_USE", "FREE", "QUEUED"]) if rows else "no pools")


def _requests(args: argparse.Namespace) -> int:
    with EmulatorControl(_address(args)) as control:
        requests = control.requests()
    if args.json:
        print(json.dumps(requests, indent=2, sort_keys=True))
    else:
        _print_requests(requests)
    return 0


def _capacity(args: argparse.Namespace) -> int:
    try:
        pools = _parse_pools(args.pools)
    except ValueError as exc:
        print(f"dws-emulator: {exc}", file=sys.stderr)
        return 2
    with EmulatorControl(_address(args)) as control:
        inventory = control.set_capacity(pools) if pools else control.capacity()
    if args.json:
        print(json.dumps(inventory, indent=2, sort_keys=True))
    else:
        _print_capacity(inventory)
    return 0


def _preempt(args: argparse.Namespace) -> int:
    with EmulatorControl(_address(args)) as control:
        record = control.preempt(args.name)
    if args.json:
        print(json.dumps(record, indent=2, sort_keys=True))
    else:
        print(f"preempted {record['name']}: {record['state']}")
    return 0


def _print_faults(report: dict[str, Any]) -> None:
    rules = [[r["spec"], str(r["fired"])] for r in report["rules"]]
    print(_format_table(rules, ["RULE", "FIRED"]) if rules else "no fault rules")
    injected = [
        [method, code, str(n)] for method, codes in report["injected"].items() for code, n in codes.items()
    ]
    if injected:
        print()
        print(_format_table(injected, ["METHOD", "INJECTED", "COUNT"]))
    for outage in report["outages"]:
        print(f"outage: {outage['seconds']:g}s from {outage['start']}")


def _faults(args: argparse.Namespace) -> int:
    if args.clear and (args.specs or args.add or args.seed is not None):
        print("dws-emulator: --clear takes no rules, --add or --seed", file=sys.stderr)
        return 2
    try:
        rules: list[FaultRule] = parse_specs(args.specs)
    except FaultSpecError as exc:
        print(f"dws-emulator: {exc}", file=sys.stderr)
        return 2
    if (args.add or args.seed is not None) and not rules:
        print("dws-emulator: --add and --seed need at least one rule", file=sys.stderr)
        return 2
    with EmulatorControl(_address(args)) as control:
        if args.clear:
            report = control.clear_faults()
        elif rules:
            report = control.set_faults([r.spec for r in rules], append=args.add, seed=args.seed)
        else:
            report = control.faults()
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        _print_faults(report)
    return 0


def _outage(args: argparse.Namespace) -> int:
    with EmulatorControl(_address(args)) as control:
        reply = control.outage(args.seconds)
    if args.json:
        print(json.dumps(reply, indent=2, sort_keys=True))
    else:
        print(
            f"outage: {reply['address']} refuses connections for {reply['seconds']:g}s, until {reply['until']}"
        )
    return 0


def _print_stats(report: dict[str, Any], reset: bool) -> None:
    rows = [[method, str(n)] for method, n in report["calls"].items()]
    if rows:
        print(_format_table(rows, ["METHOD", "CALLS"]))
        print()
    print(f"total {report['total']} calls from {report['since']} to {report['until']}")
    if reset:
        print("counters reset")


def _stats(args: argparse.Namespace) -> int:
    with EmulatorControl(_address(args)) as control:
        report = control.reset_stats() if args.reset else control.stats()
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        _print_stats(report, args.reset)
    return 0


def _lead_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"seconds must be >= 0, got {text!r}")
    return value


def _approval_seconds(text: str) -> float | str:
    return "manual" if text == "manual" else _lead_seconds(text)


def _node_pool(text: str) -> str:
    from .kube.nodepools import parse_node_pool

    try:
        parse_node_pool(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _flex_pool(text: str) -> str:
    from .kube.nodepools import parse_flex_pool

    try:
        parse_flex_pool(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"seconds must be > 0, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dws-emulator",
        description="A local Dynamic Workload Scheduler on one GPU/TPU capacity model. gRPC on --port: "
        "Vertex AI custom jobs, Cloud TPU queued resources, Cloud Batch jobs. REST on the port + 1: Compute "
        "Engine MIG resize requests (flex-start VMs), calendar-mode future reservations (advice, "
        "reservations, delivered blocks), and a GKE cluster's Kubernetes API (ProvisioningRequests, "
        "flex-start node pools, Kueue Jobs).",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the emulator")
    serve.add_argument("--host", default="127.0.0.1", help="loopback address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=0, help="port to bind; 0 picks a free one (default)")
    serve.add_argument("--seed", type=int, default=0, help="seed for ids and randomness (default 0)")
    serve.add_argument(
        "--capacity",
        action="extend",
        nargs="+",
        metavar="LOCATION/ACCELERATOR=COUNT",
        help="pool sizes; when given, only these pools exist: every built-in pool is dropped, so add "
        "each pool the workloads need (default: the built-in inventory)",
    )
    serve.add_argument(
        "--faults",
        action="extend",
        nargs="+",
        metavar="SPEC",
        help="fault rules METHOD=EFFECT[@RATE][xCOUNT][+FROM][..UNTIL], e.g. GetCustomJob=UNAVAILABLE@0.2, "
        "*=RESOURCE_EXHAUSTED@0.05, CreateCustomJob=DEADLINE_EXCEEDED@1x1, *=latency:0.3",
    )
    serve.add_argument(
        "--calendar-capacity",
        action="extend",
        nargs="+",
        metavar="ZONE/ACCELERATOR=COUNT",
        help="calendar mode's free capacity per day (GPUs by Vertex AI name, TPU families in chips); "
        "when given, only these (default: the built-in calendar)",
    )
    serve.add_argument(
        "--calendar-approval-seconds",
        type=_approval_seconds,
        metavar="S|manual",
        help="seconds from a future reservation's submission to its approval or decline (default 1, "
        "or DWS_EMULATOR_CALENDAR_APPROVAL_SECONDS); manual: only the control API decides",
    )
    serve.add_argument(
        "--calendar-min-lead-seconds",
        type=_lead_seconds,
        metavar="S",
        help="how far ahead a calendar block must start (default 0, or DWS_EMULATOR_CALENDAR_MIN_LEAD_SECONDS)",
    )
    serve.add_argument(
        "--calendar-provision-seconds",
        type=_lead_seconds,
        metavar="S",
        help="how long PROVISIONING lasts from a block's start (default 1, or "
        "DWS_EMULATOR_CALENDAR_PROVISION_SECONDS)",
    )
    serve.add_argument(
        "--kube-node-pools",
        action="extend",
        nargs="+",
        type=_node_pool,
        metavar="[NAME=]ACCELERATOR",
        help="the GKE cluster's queued node pools by GKE accelerator (nvidia-h100-80gb, nvidia-l4, ...); "
        "when given, only these (default: nvidia-h100-80gb, nvidia-a100-80gb, nvidia-l4)",
    )
    serve.add_argument(
        "--kube-booking-seconds",
        type=_lead_seconds,
        metavar="S",
        help="how long a Provisioned ProvisioningRequest keeps its nodes for pods not yet started "
        "(default 600); then BookingExpired",
    )
    serve.add_argument(
        "--kube-flex-start-pools",
        action="extend",
        nargs="*",
        type=_flex_pool,
        metavar="[NAME=]ACCELERATOR[:TOPOLOGY][@LOCATION]",
        help="the GKE cluster's flex-start node pools (no queued provisioning): a GPU (nvidia-h100-80gb) or "
        "a single-host TPU slice (tpu-v5-lite-podslice:2x4, tpu-v6e-slice:1x1); when given, only these, "
        "none without a value (default: dws-flex-<gpu> for each queued pool's GPU, and "
        "tpu-v5-lite-podslice:2x4 on us-central1-a/v5litepod)",
    )
    serve.add_argument(
        "--kueue-versions",
        choices=("v1beta2,v1beta1", "v1beta1"),
        default=None,
        help="the kueue.x-k8s.io versions served: both (Kueue 0.15 and newer, the default) or only "
        "v1beta1 (a Kueue before 0.15)",
    )
    serve.set_defaults(func=_serve)

    for name, func, help_text in (
        ("requests", _requests, "list every request ever created"),
        (
            "capacity",
            _capacity,
            "show pools, or create or resize them (the others unchanged) with LOCATION/ACCELERATOR=COUNT "
            "arguments",
        ),
        ("preempt", _preempt, "preempt an ACTIVE Spot TPU queued resource"),
        ("faults", _faults, "show fault rules and injected faults, set rules (SPEC ...) or --clear them"),
        ("outage", _outage, "refuse connections for SECONDS, then serve the same state again"),
        ("stats", _stats, "show how many calls each emulated method received since the last reset"),
    ):
        cmd = sub.add_parser(name, help=help_text)
        cmd.add_argument("--host", default="127.0.0.1")
        cmd.add_argument("--port", type=int, required=True)
        cmd.add_argument("--json", action="store_true", help="print JSON")
        if name == "capacity":
            cmd.add_argument("pools", nargs="*", metavar="LOCATION/ACCELERATOR=COUNT")
        if name == "preempt":
            cmd.add_argument("name", metavar="projects/P/locations/ZONE/queuedResources/ID")
        if name == "faults":
            cmd.add_argument(
                "specs", nargs="*", metavar="SPEC", help="METHOD=EFFECT[@RATE][xCOUNT][+FROM][..UNTIL]"
            )
            cmd.add_argument("--clear", action="store_true", help="remove every rule")
            cmd.add_argument("--add", action="store_true", help="append the rules instead of replacing them")
            cmd.add_argument("--seed", type=int, help="reseed the fault generator")
        if name == "outage":
            cmd.add_argument("seconds", type=_seconds, metavar="SECONDS")
        if name == "stats":
            cmd.add_argument(
                "--reset", action="store_true", help="zero the counters after reading them (atomically)"
            )
        cmd.set_defaults(func=func)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dws-emulator`` console script."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except grpc.RpcError as exc:
        print(f"dws-emulator: {exc.code().name}: {exc.details()}", file=sys.stderr)  # type: ignore[attr-defined]
        return 1
