"""The HTML of what the page says ahead and around each request (:mod:`.outlook`'s figures).

The Expected wait and At most cells of the request tables, and the summary's Forecasts,
Emissions (estimate) and Cost up front blocks. Every value is escaped (:func:`.fmt.h`); long
phrases are kept whole with the ``nw`` class so the cells stay compact (docs/ui.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_dws.forecast import MIN_REQUESTS, describe_group, group_of
from airflow_provider_dws.records import ON_BLOCK_PRICING, RequestRecord
from airflow_provider_dws.upfront import BlockCost, block_cost, is_block, max_cost

from .fmt import duration, h, hours, money, plural, rate
from .outlook import Outlook, given_at_submit


def _figure(seconds: float | None, more_than: bool) -> str:
    """A percentile in the page's duration style: ``38m 00s`` or ``more than 2h 10m``."""
    text = duration(seconds) or "unknown"
    return f"more than {text}" if more_than else text


def _percentiles(p50: float | None, p50_more: bool, p90: float | None, p90_more: bool) -> str:
    parts = [
        f"<span class='nw'>{name} {h(_figure(value, more))}</span>"
        for name, value, more in (("p50", p50, p50_more), ("p90", p90, p90_more))
        if value is not None
    ]
    return " · ".join(parts)


def expected_wait_cell(record: RequestRecord, ahead: Outlook) -> str:
    """The Expected wait cell: the group's forecast over the requests the page read (or that there
    is too little history), the capacity advice's obtainability, the forecast given at submit."""
    group = group_of(record)
    if group is None:
        lines = ["<span class='muted'>no forecast: it does not wait for DWS capacity</span>"]
    else:
        found = ahead.forecast_of(record)
        requests = found.requests if found else 0
        days = f"{ahead.window.total_seconds() / 86400:g}"
        title = (
            f"{describe_group(group)}: {plural(requests, 'similar request')} read, submitted in the "
            f"last {days} days, {found.obtained if found else 0} got capacity"
        )
        if found is not None and found.enough:
            text = (
                _percentiles(found.p50, found.p50_more_than, found.p90, found.p90_more_than)
                + f" <span class='muted nw'>({plural(requests, 'request')})</span>"
            )
        else:
            text = f"<span class='nw'>too little history</span> <span class='muted nw'>({requests} of {MIN_REQUESTS})</span>"
        lines = [f'<span title="{h(title)}">{text}</span>']
    if record.obtainability is not None:
        lines.append(
            "<span class='nw' title=\"the capacity advice's obtainability of its placement, 0 to 1\">"
            f"advice {record.obtainability:.2f}</span>"
        )
    given = given_at_submit(record)
    if given is not None:
        figures = _percentiles(
            given["p50_seconds"], given["p50_more_than"], given["p90_seconds"], given["p90_more_than"]
        )
        lines.append(f"<span class='muted'>given at submit: {figures}</span>")
    return "<br>".join(lines)


def _others(on_demand: float | None, spot: float | None) -> str:
    """``on demand $512.00 · Spot $160.00`` (muted, beneath a cost; ``""`` without either price)."""
    parts = [
        f"<span class='nw'>{name} {h(money(value))}</span>"
        for name, value in (("on demand", on_demand), ("Spot", spot))
        if value is not None
    ]
    return f"<br><span class='muted'>{' · '.join(parts)}</span>" if parts else ""


def _block_cell(block: BlockCost) -> str:
    share = f" ({rate(block.used_share)})" if block.used_share is not None else ""
    if block.whole is None or block.used is None:
        head = (
            f"<span class='muted'>unpriced</span><br><span class='nw'>{h(rate(block.used_share))} used</span>"
        )
    else:
        head = (
            f"<span class='nw'>{h(money(block.whole))} in all</span><br>"
            f"<span class='nw'>{h(money(block.used))} used{h(share)}</span>"
        )
    title = f"{hours(block.block_hours)} accelerator-hours, {hours(block.used_hours)} used"
    return f'<span title="{h(title)}">{head}</span>{_others(block.on_demand, block.spot)}'


def at_most_cell(record: RequestRecord, ahead: Outlook) -> str:
    """The At most cell: the most the request can cost, the same hours on demand and on Spot
    beneath; a calendar block's whole cost and the part used so far."""
    block = block_cost(record, ahead.prices, ahead.now)
    if block is not None:
        return _block_cell(block)
    if record.pricing_model == ON_BLOCK_PRICING:
        return "<span class='muted'>billed with its block</span>"
    if not record.accelerator_count:
        return "<span class='muted'>no accelerators</span>"
    cost = max_cost(record, ahead.prices)
    if cost.accelerator_hours is None:
        return f"<span class='muted'>{'block times unknown' if is_block(record) else 'no max_run'}</span>"
    title = f"{hours(cost.accelerator_hours)} accelerator-hours ({cost.hours_basis}) x the {record.pricing_model} price"
    head = "<span class='muted'>unpriced</span>" if cost.most is None else h(money(cost.most))
    return f'<span class="nw" title="{h(title)}">{head}</span>{_others(cost.on_demand, cost.spot)}'


def _signed(seconds: float) -> str:
    return ("+" if seconds >= 0 else "-") + duration(abs(seconds))


def forecasts_block(found: Mapping[str, Any]) -> str:
    """How often the p90 given at submit was exceeded, and the mean error (actual - p50 given)."""
    out = ["<h3 id='forecasts'>Forecasts</h3>"]
    judged, exceeded = found["forecasts"], found["p90_exceeded"]
    if not found.get("given") and not judged:
        out.append("<p id='forecast-accuracy'>No request has been given a forecast yet.</p>")
        return "".join(out)
    if judged:
        line = (
            f"p90 exceeded by {exceeded} of {plural(judged, 'request')} ({rate(found['p90_exceeded_share'])}); "
            "a true p90 is exceeded by about 1 in 10."
        )
    else:
        line = (
            f"{plural(found['given'], 'request')} given a forecast at submit; none has a wait known "
            "against its p90 yet."
        )
    error = found.get("mean_error_seconds")
    if error is not None:
        side = "later than" if error >= 0 else "sooner than"
        line += f" Mean error (actual wait - p50 given): {_signed(error)} ({side} the p50)."
    out.append(f"<p id='forecast-accuracy'>{h(line)}</p>")
    out.append(
        "<p class='muted formula'>Over the requests above that were given a forecast at submit (from "
        "the wait history of similar requests): a wait is judged against its p90 once it got "
        "capacity, or passed the p90 without; a p90 given only as a lower bound is not judged.</p>"
    )
    return "".join(out)


def _kg(value: float | None) -> str:
    return "" if value is None else f"{value:,.2f} kg CO2e"


def emissions_block(found: Mapping[str, Any]) -> str:
    """The estimated emissions of the accelerator-hours run and of the idle hours avoided by
    waiting, the requests without a figure, the formula and the table's source and year."""
    out = ["<h3 id='emissions'>Emissions (estimate)</h3>"]
    if found.get("error"):
        out.append(f"<p class='warn'>Carbon table override not used: {h(found['error'])}</p>")
    if found["known"]:
        out.append(
            f"<p id='emissions-total'>Run: <strong>{h(_kg(found['run_kg']))}</strong> "
            f"({h(hours(found['run_hours']))} accelerator-hours). Idle hours avoided by waiting instead "
            f"of holding: up to <strong>{h(_kg(found['avoided_idle_kg']))}</strong> "
            f"({h(hours(found['avoided_hours']))} accelerator-hours).</p>"
        )
    else:
        out.append("<p id='emissions-total'>No request has an emissions figure.</p>")
    if found["unknown"]:
        out.append(
            f"<p>{h(plural(found['unknown'], 'request'))} without a figure (its accelerator's power or "
            "its region's carbon intensity is not in the table; none is guessed).</p>"
        )
    out.append(f"<p class='muted formula' id='emissions-formula'>{h(found['formula'])}</p>")
    out.append(
        f"<p class='muted formula' id='emissions-source'>Carbon intensity: {h(found['source'])} "
        f"(year {h(found['year'])}). Board power: each accelerator's datasheet (docs/carbon.md).</p>"
    )
    return "".join(out)


def cost_block(found: Mapping[str, Any]) -> str:
    """What the At most column is (the formula), and the prices' source and date."""
    date = f"as of {found['price_date']}" if found.get("price_date") else "no date given"
    out = [
        "<h3 id='cost-up-front'>Cost up front (At most)</h3>",
        f"<p id='cost-prices'>Prices: <strong>{h(found['price_source'])}</strong>, {h(date)}.</p>",
    ]
    if found.get("price_error"):
        out.append(f"<p class='warn'>The price table is not usable: {h(found['price_error'])}</p>")
    out.append(f"<p class='muted formula' id='cost-formula'>{h(found['formula'])}</p>")
    return "".join(out)
