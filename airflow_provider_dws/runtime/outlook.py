"""What a request can expect, said before it waits: its wait from this deployment's history, the
most it can cost, and the order a ranked failover tries its placements in.

:func:`at_submit` runs once per request, when its first record is written: it logs the expected
wait of similar requests (:mod:`~airflow_provider_dws.forecast`, read from
:mod:`~airflow_provider_dws.wait_history`), warns when the max wait is shorter than their p50, logs
the most the request can cost (:mod:`~airflow_provider_dws.upfront`), and returns the record with
the forecast it was given, so the DWS page can later tell how good the forecasts were.
:func:`rank` orders the placements of a ranked failover (:class:`~..scheduling.policies.ShortestWait`,
:class:`~..scheduling.policies.Advised`, or any failover with ``greener=True``). What it cannot read
(no history, no price table, an advice that fails) it says, and the request goes ahead.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from airflow_provider_dws.backends.base import RequestStatus
from airflow_provider_dws.scheduling.phases import Outcome, Phase, RequestTimings
from airflow_provider_dws.scheduling.ranking import Candidate, rank_candidates

if TYPE_CHECKING:
    from airflow_provider_dws.forecast import Forecast
    from airflow_provider_dws.records import RequestRecord
    from airflow_provider_dws.runtime.loop import AttemptLoop
    from airflow_provider_dws.runtime.state import AttemptState
    from airflow_provider_dws.scheduling.policies import Placement


def at_submit(loop: AttemptLoop, record: RequestRecord, placement: Placement) -> RequestRecord:
    """Log what ``record``'s request can expect; the record with the forecast it was given."""
    from airflow_provider_dws import wait_history
    from airflow_provider_dws.forecast import figure, forecast_line, group_of, short_of_p50, span

    max_run = getattr(loop.op, "max_run", None)
    if isinstance(max_run, timedelta):
        record = replace(record, max_run_seconds=max_run.total_seconds())
    # The scores of the ranking just before this request, used once (a later unranked attempt has none).
    score = loop.advice.get(placement)
    loop.advice = {}
    if score is not None:
        record = replace(record, obtainability=score)
    group = group_of(record)
    ranked = loop.forecasts.get(placement)
    loop.forecasts = {}
    if ranked is not None and ranked.group == group:  # read for the ranking a moment ago
        found: Forecast | None = ranked
    else:
        found = wait_history.forecast(group) if group is not None else None
    max_wait = timedelta(seconds=record.max_wait_seconds) if record.max_wait_seconds else None
    if found is not None:
        line = forecast_line(found, max_wait)
        if score is not None:
            line += f"; capacity advice: obtainability {score:.2f} now"
        loop.log.info("%s", line)
        if max_wait is not None and short_of_p50(found, max_wait):
            loop.log.warning(
                "The max wait (%s) is shorter than the p50 wait of similar requests (%s): more than "
                "half of them would not have got capacity within it. A longer max_wait, an off-peak "
                "window or a failover gives this request a better chance",
                span(max_wait.total_seconds()),
                figure(found.p50, found.p50_more_than),
            )
        if found.enough:
            record = replace(
                record,
                expected_wait_p50_seconds=found.p50,
                expected_wait_p50_lower_bound=found.p50_more_than,
                expected_wait_p90_seconds=found.p90,
                expected_wait_p90_lower_bound=found.p90_more_than,
                expected_wait_basis=found.requests,
            )
    _log_cost(loop, record)
    return record


def _log_cost(loop: AttemptLoop, record: RequestRecord) -> None:
    from airflow_provider_dws.savings import NO_TABLE_SOURCE, PriceTable, in_task, load_prices
    from airflow_provider_dws.upfront import cost_line

    try:
        # Outside a task (a test, a script) there is no deployment whose Variables to read.
        prices = load_prices() if in_task() else PriceTable({}, NO_TABLE_SOURCE)
        line = cost_line(record, prices)
    except Exception:
        loop.log.warning("Could not work out what %s can cost", record.request_name, exc_info=True)
        return
    if line:
        loop.log.info("%s", line)


def _pending(placement: Placement) -> RequestStatus:
    from airflow_provider_dws.triggers.submit import PENDING_PREFIX

    return RequestStatus(
        name=f"{PENDING_PREFIX}outlook/{placement.location}",
        state="SUBMITTING",
        outcome=Outcome(Phase.WAITING, None, ""),
        timings=RequestTimings(submitted=datetime.now(timezone.utc)),
    )


def forecast_for(loop: AttemptLoop, placement: Placement) -> Forecast | None:
    """The forecast of a request this task would make in ``placement`` (``None``: unknown)."""
    from airflow_provider_dws import wait_history
    from airflow_provider_dws.forecast import group_key

    try:
        facts = loop.adapter.record_facts(_pending(placement), placement)
    except Exception:
        loop.log.debug("No request shape for %s", placement, exc_info=True)
        return None
    api = facts.get("api")
    if not api:
        return None
    group = group_key(
        str(api),
        placement.location,
        facts.get("accelerator_type"),
        facts.get("accelerator_count") or 0,
        str(facts.get("pricing_model") or "flex_start"),
    )
    return wait_history.forecast(group)


def _scores(loop: AttemptLoop, placements: list[Placement]) -> dict[Placement, float]:
    try:
        ranked = loop.adapter.advise(placements)
    except Exception as err:
        loop.log.warning("Capacity advice failed (%s); ranking without it", err)
        return {}
    return dict(ranked or ())


def _intensities(loop: AttemptLoop, placements: list[Placement]) -> dict[Placement, float | None]:
    from airflow_provider_dws.carbon import SHIPPED, load_carbon
    from airflow_provider_dws.savings import in_task

    table = load_carbon() if in_task() else SHIPPED
    if table.error:
        loop.log.warning("The carbon table override is unusable (%s); using the shipped table", table.error)
    return {p: table.intensity(p.location) for p in placements}


def _describe(candidate: Candidate[Placement], order: str, greener: bool) -> str:
    parts = []
    if candidate.score is not None:
        parts.append(f"advice {candidate.score:.2f}")
    if order == "expected_wait":
        parts.append(candidate.wait_text or "no forecast")
    if greener:
        parts.append(
            f"{candidate.intensity:g} gCO2eq/kWh" if candidate.intensity is not None else "no carbon figure"
        )
    return f"{candidate.item} ({', '.join(parts)})" if parts else str(candidate.item)


def _candidate(
    placement: Placement, index: int, found: Forecast | None, score: float | None, intensity: float | None
) -> Candidate[Placement]:
    from airflow_provider_dws.forecast import figure

    if found is None:
        return Candidate(placement, index, score=score, intensity=intensity)
    if not found.enough or found.p50 is None:
        text = f"too few requests for a forecast ({found.requests})"
        return Candidate(placement, index, score=score, wait_text=text, intensity=intensity)
    # A p50 only known to be longer than the longest wait seen ranks after that wait seen whole.
    wait = found.p50 + (1.0 if found.p50_more_than else 0.0)
    text = f"p50 {figure(found.p50, found.p50_more_than)} from {found.requests} requests"
    return Candidate(placement, index, score=score, wait=wait, wait_text=text, intensity=intensity)


def rank(loop: AttemptLoop, state: AttemptState) -> AttemptState:
    """The attempt in the placement the failover's order ranks first among those not tried yet
    (all, once each was); logs the ranking and the figures behind it."""
    from airflow_provider_dws.scheduling.policies import Placement

    failover = loop.op.failover
    if failover is None:
        return state
    order, greener = failover.order, failover.greener
    tried = {Placement.from_dict(dict(h["placement"])) for h in state.history if h.get("placement")}
    candidates = loop.op.placements()
    untried = [p for p in candidates if p not in tried] or candidates
    scores = _scores(loop, untried) if order in ("advice", "expected_wait") else {}
    loop.advice = scores
    if order == "advice" and not scores:
        return state if state.placement in untried else replace(state, placement=untried[0])
    waits = {p: forecast_for(loop, p) for p in untried} if order == "expected_wait" else {}
    loop.forecasts = {p: f for p, f in waits.items() if f is not None}
    intensity = _intensities(loop, untried) if greener else {}
    items = [
        _candidate(p, candidates.index(p), waits.get(p), scores.get(p), intensity.get(p)) for p in untried
    ]
    ranked = rank_candidates(items, order, greener)
    best = ranked[0].item
    words = {"advice": "capacity advice", "expected_wait": "expected wait", "written": "the written order"}
    loop.log.info(
        "Placements by %s%s: %s; trying %s",
        words.get(order, order),
        ", lower carbon intensity breaking ties" if greener else "",
        ", ".join(_describe(c, order, greener) for c in ranked),
        best,
    )
    return replace(state, placement=best)
