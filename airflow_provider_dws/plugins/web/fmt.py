"""The DWS page's words for values: escaped text, durations, times, money, hours, shares.

Shared by :mod:`.render` and :mod:`.outlook_html`; plain functions of their argument.
"""

from __future__ import annotations

from datetime import datetime
from html import escape
from typing import Any

from airflow_provider_dws.records import parse_time


def h(value: Any) -> str:
    """``value`` as escaped HTML text (``""`` for ``None``)."""
    return "" if value is None else escape(str(value), quote=True)


def duration(seconds: float | None) -> str:
    """``1h 02m``, ``3m 05s``, ``12s``; ``""`` when unknown."""
    if seconds is None:
        return ""
    total = round(seconds)
    whole_hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if whole_hours:
        return f"{whole_hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def when(value: str | datetime | None) -> str:
    """A time as ``2026-12-01 10:04:05Z`` in a ``<time>`` element."""
    stamp = parse_time(value) if isinstance(value, str) else value
    if stamp is None:
        return ""
    return f'<time datetime="{h(stamp.isoformat())}">{h(stamp.strftime("%Y-%m-%d %H:%M:%SZ"))}</time>'


def money(value: float | None) -> str:
    """``$1,234.50``; ``""`` when unknown."""
    return "" if value is None else f"${value:,.2f}"


def hours(value: float | None) -> str:
    """Accelerator-hours as ``1,234.50``; ``""`` when unknown."""
    return "" if value is None else f"{value:,.2f}"


def rate(value: float | None) -> str:
    """A share as ``25%``; ``""`` when unknown."""
    return "" if value is None else f"{value:.0%}"


def plural(count: int, word: str) -> str:
    """``1 request``, ``6 requests``."""
    return f"{count} {word}{'' if count == 1 else 's'}"
