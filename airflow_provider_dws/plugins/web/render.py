"""Server-rendered HTML of the DWS page and the task-instance tab (no front-end build, no script).

Every value is escaped (:func:`h`); links that leave the page (task instance, log) target the top
window, since the page is shown in an iframe of the Airflow UI.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlencode

from airflow_provider_dws.records import PHASES, TASK_ENDED, api_name

from .data import Filters, Row, log_path, ti_path
from .fmt import duration, h, when
from .fmt import hours as _hours
from .fmt import money as _money
from .fmt import rate as _rate
from .outlook import Outlook
from .outlook_html import at_most_cell, cost_block, emissions_block, expected_wait_cell, forecasts_block

# h, duration and when are .fmt's, named here too: the page's callers read them from render.
__all__ = [
    "CSS",
    "PRICE_HELP_ROUTE",
    "duration",
    "empty_state",
    "filters_form",
    "freshness",
    "h",
    "page",
    "query_string",
    "request_sections",
    "summary_section",
    "when",
]

#: The route of the price table's help (``views.price_help``, package data), relative to ``/dws/``.
PRICE_HELP_ROUTE = "help/price-table.md"

CSS = """
:root { color-scheme: light dark; --bg:#ffffff; --fg:#1a1a1a; --muted:#555; --line:#d0d0d0;
  --head:#f2f4f7; --bar:#2563eb; --bar-bg:#dbe3f0; --warn:#9a3412; --link:#1d4ed8; --focus:#f59e0b; }
@media (prefers-color-scheme: dark) {
  :root { --bg:#121417; --fg:#e8e8e8; --muted:#b0b0b0; --line:#3a3f47; --head:#1d2127;
    --bar:#60a5fa; --bar-bg:#2a3342; --warn:#fdba74; --link:#93c5fd; }
}
body { background:var(--bg); color:var(--fg); font:14px/1.45 system-ui, sans-serif; margin:16px; max-width:1600px; }
h1 { font-size:20px; margin:0 0 8px; } h2 { font-size:16px; margin:24px 0 8px; } h3 { font-size:14px; margin:16px 0 4px; }
a { color:var(--link); } a:focus, input:focus, input:focus-within, select:focus, button:focus { outline:3px solid var(--focus); outline-offset:1px; }
table { border-collapse:collapse; width:100%; margin-bottom:8px; }
th, td { border-bottom:1px solid var(--line); padding:4px 6px; text-align:left; vertical-align:top; }
th { background:var(--head); font-weight:600; } td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; }
.muted { color:var(--muted); } .warn { color:var(--warn); font-weight:600; }
form.filters { display:flex; flex-wrap:wrap; gap:8px 16px; align-items:end; margin:8px 0 16px; }
form.filters label { display:flex; flex-direction:column; font-size:12px; color:var(--muted); }
form.filters input, form.filters select, form.filters button { font:inherit; padding:3px 6px; color:var(--fg);
  background:var(--bg); border:1px solid var(--line); border-radius:4px; }
.bar { display:inline-block; width:120px; height:10px; background:var(--bar-bg); border-radius:5px; vertical-align:middle; margin-right:6px; }
.bar > span { display:block; height:100%; background:var(--bar); border-radius:5px; }
.empty { padding:24px; border:1px dashed var(--line); border-radius:6px; }
td { overflow-wrap:anywhere; } .nw, td.links { white-space:nowrap; overflow-wrap:normal; }
.formula { font-size:13px; max-width:110ch; }
"""


def page(title: str, body: str) -> str:
    """A whole HTML document."""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{h(title)}</title><style>{CSS}</style></head><body><main>{body}</main></body></html>"
    )


def _links(row: Row, base: str) -> str:
    parts = [
        f'<a href="{h(base + ti_path(row.ti))}" target="_top">task</a>',
        f'<a href="{h(base + log_path(row.ti))}" target="_top">log</a>',
    ]
    if row.record.console_url:
        parts.append(f'<a href="{h(row.record.console_url)}" target="_blank" rel="noopener">console</a>')
    return " · ".join(parts)


def _task(row: Row) -> str:
    ti = row.ti
    mapped = f"[{ti.map_index}]" if ti.map_index >= 0 else ""
    text = f"{h(ti.dag_id)} / {h(ti.task_id)}{h(mapped)}<br><span class='muted'>{h(ti.run_id)}</span>"
    if row.also:
        others = ", ".join(h(o.task_id) for o in row.also)
        text += f"<br><span class='muted'>also: {others}</span>"
    return text


def _what(row: Row) -> str:
    r = row.record
    accel = f"{r.accelerator_count} x {r.accelerator_type}" if r.accelerator_type else (r.machine_type or "")
    return f"{h(api_name(r.api))} · {h(r.location)}<br><span class='muted'>{h(accel)}</span>"


def _request(row: Row) -> str:
    """The request's name, shortened to its last two segments (the whole name as a tooltip)."""
    name = row.record.request_name
    short = "/".join(name.split("/")[-2:])
    return f'<span title="{h(name)}">{h(short)}</span>'


def _wait_bar(row: Row, now: datetime) -> str:
    waited = row.waited_seconds(now)
    limit = row.record.max_wait_seconds
    if waited is None:
        return ""
    if not limit:
        return f"{h(duration(waited))} <span class='muted'>(no max wait)</span>"
    share = min(1.0, waited / limit)
    percent = round(share * 100)
    text = f"{duration(waited)} of {duration(limit)} max wait ({percent}%)"
    words = (
        f"<span class='nw'>{h(duration(waited))}</span> of <span class='nw'>{h(duration(limit))} max wait</span> "
        f"<span class='nw'>({percent}%)</span>"
    )
    return (
        f'<span class="bar" role="img" aria-label="{h(text)}"><span style="width:{percent}%"></span></span>'
        f"{words}"
    )


def _outcome(row: Row) -> str:
    """The phase, the API's outcome when it says more, and why the page ended a record its task left live."""
    r = row.record
    text = h(r.phase)
    if row.settled:
        return text + f"<br><span class='warn'>{h(row.settled)}</span>"
    if r.outcome == TASK_ENDED:  # ended by the provider outside the attempt loop: its message says why
        return text + f"<br><span class='warn'>{h(r.message or 'its task ended')}</span>"
    if r.outcome and r.outcome != r.phase:
        text += f"<br><span class='muted'>{h(r.outcome)}</span>"
    return text


def _table(caption: str, heads: Sequence[str], rows: Sequence[Sequence[str]], empty: str) -> str:
    if not rows:
        return f"<p class='muted'>{h(empty)}</p>"
    head = "".join(f'<th scope="col">{h(x)}</th>' for x in heads)
    last = len(heads) - 1
    links = heads[-1] == "Links"
    body = "".join(
        "<tr>"
        + "".join(
            f"<td class='links'>{c}</td>" if links and i == last else f"<td>{c}</td>"
            for i, c in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    return f"<table><caption class='muted' style='text-align:left'>{h(caption)}</caption><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _waiting_table(rows: Sequence[Row], now: datetime, base: str, ahead: Outlook | None) -> str:
    extra = ["Expected wait", "At most"] if ahead else []
    cells = [
        [
            _task(r),
            _what(r),
            _request(r),
            when(r.record.submitted),
            _wait_bar(r, now),
            *([expected_wait_cell(r.record, ahead), at_most_cell(r.record, ahead)] if ahead else []),
            _links(r, base),
        ]
        for r in rows
    ]
    heads = ["Task", "API / location", "Request", "Submitted", "Waited / max wait", *extra, "Links"]
    return _table("Requests queued for capacity", heads, cells, "No request is waiting.")


def _running_table(rows: Sequence[Row], base: str, ahead: Outlook | None) -> str:
    extra = ["At most"] if ahead else []
    cells = [
        [
            _task(r),
            _what(r),
            _request(r),
            h(r.record.phase) + (" (holds)" if r.record.holds else ""),
            when(r.record.started),
            when(r.record.held_since),
            when(r.idle_since()) or ("<span class='muted'>in use</span>" if r.record.holds else ""),
            *([at_most_cell(r.record, ahead)] if ahead else []),
            _links(r, base),
        ]
        for r in rows
    ]
    heads = ["Task", "API / location", "Request", "Phase", "Started", "Held since", "Idle since", *extra]
    caption = "Requests that got capacity and still run or hold it"
    return _table(caption, [*heads, "Links"], cells, "Nothing runs or is held.")


def _ended_table(rows: Sequence[Row], now: datetime, base: str) -> str:
    cells = [
        [
            _task(r),
            _what(r),
            _request(r),
            _outcome(r),
            when(r.record.submitted),
            h(duration(r.waited_seconds(now))),
            h(duration(r.run_seconds(now))) or "<span class='muted'>never ran</span>",
            _links(r, base),
        ]
        for r in rows
    ]
    heads = ["Task", "API / location", "Request", "Outcome", "Submitted", "Wait", "Run", "Links"]
    return _table("Requests that ended", heads, cells, "No request ended in this range.")


def request_sections(rows: Sequence[Row], now: datetime, base: str, ahead: Outlook | None = None) -> str:
    """The three sections: waiting now, running or held, ended; with ``ahead`` (the page request's
    :class:`~.outlook.Outlook`) the waiting rows show their expected wait, and the waiting and the
    running or held rows the most they can cost (:mod:`.outlook_html`)."""
    waiting = [r for r in rows if r.section == "waiting"]
    running = [r for r in rows if r.section == "running"]
    ended = [r for r in rows if r.section == "ended"]
    return "".join(
        (
            f"<h2 id='waiting'>Waiting now ({len(waiting)})</h2>",
            _waiting_table(waiting, now, base, ahead),
            f"<h2 id='running'>Running or held ({len(running)})</h2>",
            _running_table(running, base, ahead),
            f"<h2 id='ended'>Ended ({len(ended)})</h2>",
            _ended_table(ended, now, base),
        )
    )


def _select(name: str, label: str, value: str | None, options: Sequence[str]) -> str:
    label_of = api_name if name == "api" else str
    opts = ['<option value="">any</option>'] + [
        f'<option value="{h(o)}"{" selected" if o == value else ""}>{h(label_of(o))}</option>'
        for o in options
    ]
    return f'<label for="f-{name}">{h(label)}<select id="f-{name}" name="{name}">{"".join(opts)}</select></label>'


def filters_form(filters: Filters, choices: Mapping[str, Sequence[str]], action: str) -> str:
    """The GET form of the filters; ``choices`` holds the DAGs, APIs and locations seen."""
    since = filters.since.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M") if filters.since else ""
    until = filters.until.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M") if filters.until else ""
    return (
        f'<form class="filters" method="get" action="{h(action)}" aria-label="Filters">'
        + _select("dag_id", "DAG", filters.dag_id, choices.get("dag_id", []))
        + _select("api", "API", filters.api, choices.get("api", []))
        + _select("location", "Location", filters.location, choices.get("location", []))
        + _select("phase", "Phase", filters.phase, [*PHASES, "holding"])
        + f'<label for="f-since">Since (UTC)<input id="f-since" type="datetime-local" name="since" value="{h(since)}"></label>'
        + f'<label for="f-until">Until (UTC)<input id="f-until" type="datetime-local" name="until" value="{h(until)}"></label>'
        + '<button type="submit">Apply</button>'
        + f' <a href="{h(action)}">reset</a></form>'
    )


def _summary_table(caption: str, first: str, items: Sequence[Mapping[str, Any]]) -> str:
    heads = [
        first,
        "Requests",
        "Not obtained",
        "p50 wait",
        "p95 wait",
        "Accel-h run (billed)",
        "Accel-h waited (not billed)",
        "Accel-h held idle",
        "Run cost",
        "Holding cost",
        "Saved by waiting",
    ]
    rows = []
    for s in items:
        unpriced = f" <span class='muted'>({s['unpriced']} unpriced)</span>" if s.get("unpriced") else ""
        rows.append(
            [
                h(s["key"]),
                h(s["requests"]),
                h(
                    f"{s['not_obtained']} ({_rate(s['not_obtained_rate'])})"
                    if s["not_obtained_rate"] is not None
                    else s["not_obtained"]
                ),
                h(duration(s["wait_p50_seconds"])),
                h(duration(s["wait_p95_seconds"])),
                h(_hours(s["run_hours"])),
                h(_hours(s["waited_hours"])),
                h(_hours(s["idle_hours"])),
                h(_money(s["run_cost"])),
                h(_money(s["hold_cost"])),
                h(_money(s["saved"])) + unpriced,
            ]
        )
    return _table(caption, heads, rows, "No requests in this range.")


def summary_section(summary: Mapping[str, Any] | None, app_base: str, error: str | None = None) -> str:
    """The summary tables and where the prices came from; ``app_base`` is the app's path (``/dws/``)."""
    out = ["<h2 id='summary'>Summary</h2>"]
    if summary is None:
        out.append(f"<p class='warn'>The summary is not available: {h(error)}</p>")
        return "".join(out)
    prices = summary["prices"]
    if prices.get("error"):
        out.append(
            f"<p class='warn'>Price table ({h(prices['source'])}) is not usable: {h(prices['error'])}</p>"
        )
    elif prices["source"] == "no price table set":
        out.append(
            "<p>No price table set: costs are not shown. Set the Airflow Variable <code>dws_prices</code> "
            "(JSON, USD per accelerator-hour by accelerator type and pricing model) or the "
            f'<code>[dws_prices]</code> config section; see <a href="{h(app_base + PRICE_HELP_ROUTE)}" target="_blank" rel="noopener">how to set a price table</a>.</p>'
        )
    else:
        out.append(
            f"<p>Prices from: <strong>{h(prices['source'])}</strong> ({h(prices['entries'])} entries).</p>"
        )
    if summary.get("formula"):
        out.append(f"<p class='muted formula' id='saved-formula'>{h(summary['formula'])}</p>")
    total = summary.get("total")
    out.append(_summary_table("Total", "All", [total] if total else []))
    out.append(_summary_table("Per DAG", "DAG", summary["by_dag"]))
    out.append(_summary_table("Per day (UTC, of submission)", "Day", summary["by_day"]))
    if summary.get("forecast_accuracy") is not None:
        out.append(forecasts_block(summary["forecast_accuracy"]))
    if summary.get("emissions") is not None:
        out.append(emissions_block(summary["emissions"]))
    if summary.get("cost") is not None:
        out.append(cost_block(summary["cost"]))
    return "".join(out)


def query_string(filters: Filters) -> str:
    """``filters`` as a query string (for links that keep them)."""
    params = {
        "dag_id": filters.dag_id,
        "api": filters.api,
        "location": filters.location,
        "phase": filters.phase,
        "since": filters.since.isoformat() if filters.since else None,
        "until": filters.until.isoformat() if filters.until else None,
    }
    return urlencode({k: v for k, v in params.items() if v})


def freshness(rows: Sequence[Row], now: datetime) -> str:
    """How fresh the page is: read now from the records tasks wrote, the newest write, and what a row's
    times mean (the page asks no cloud API: a request is rewritten when its task sees it change)."""
    newest = max((row.written for row in rows), default=None)
    latest = f" The newest record was written {when(newest)}." if newest else ""
    return (
        f"<p class='muted' id='freshness'>Read {when(now)} from the records the tasks wrote.{latest} A task "
        "rewrites its request's record when it sees the request change phase; waits and runs still going "
        "are counted to now. A request whose task ended while it waited is shown ended, with why, and "
        "counted to the task's end. Reload for newer figures.</p>"
    )


def empty_state() -> str:
    """What an empty deployment shows."""
    return (
        "<div class='empty' role='status'><h2>No DWS requests yet</h2><p>Requests appear here once a task "
        "of this provider (Vertex AI Flex Start, TPU queued resource, Cloud Batch) submits one, in a DAG "
        "you may read. Try the example DAGs, or widen the filters.</p></div>"
    )
