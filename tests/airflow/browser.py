"""Debian's Chromium (``/usr/bin/chromium``) driven by Playwright, for the DWS page's browser tests.

Never a browser download: Playwright is told the executable's path. A test module marks itself
with :data:`NEEDS_BROWSER`: skipped, saying why, when Playwright or Chromium is missing
(``apt-get install -y chromium``; ``.ci/run`` installs it), and under CI a missing browser is an
error instead. Screenshots (1280 px wide) go to ``docs/images/`` with ``DWS_SCREENSHOTS=docs``
(so a test run leaves the work tree alone), else to a temp dir.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.airflow.conftest import ROOT

CHROMIUM = Path("/usr/bin/chromium")
#: ``DWS_SCREENSHOTS=docs`` writes the README's screenshots (docs/images/); otherwise a temp dir.
IMAGES = (
    ROOT / "docs" / "images"
    if os.environ.get("DWS_SCREENSHOTS") == "docs"
    else Path(tempfile.gettempdir()) / "dws-page-screenshots"
)
WAIT_MS = 60_000  # a busy 2-core machine renders the React UI slowly

MISSING = (
    "playwright is not installed"
    if importlib.util.find_spec("playwright") is None
    else f"no Chromium at {CHROMIUM} (apt-get install -y chromium)"
    if not CHROMIUM.exists()
    else None
)
if MISSING and os.environ.get("CI"):
    raise RuntimeError(f"the browser tests cannot run under CI: {MISSING}")
NEEDS_BROWSER = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")


def open_page(browser: Any, base: str, token: str, scheme: str = "light") -> Any:
    """A new 1280 px page logged in as a browser would be: the UI's ``_token`` cookie."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme=scheme)
    context.set_default_timeout(WAIT_MS)
    context.add_cookies([{"name": "_token", "value": token, "url": base}])
    return context.new_page()


#: WCAG 2 contrast of every visible text node against the first opaque background behind it; the
#: texts checked and the offenders (ratio below 4.5:1, or 3:1 for text of 18.66 px bold or 24 px) come back.
CONTRAST_SCRIPT = """() => {
  const rgb = (c) => (c.match(/[\\d.]+/g) || []).map(Number);
  const lum = ([r, g, b]) => {
    const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
  };
  const background = (el) => {
    for (let e = el; e; e = e.parentElement) {
      const c = rgb(getComputedStyle(e).backgroundColor);
      if (c.length === 3 || (c.length === 4 && c[3] === 1)) return c.slice(0, 3);
    }
    return [255, 255, 255];
  };
  const bad = [];
  let checked = 0;
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const el = n.parentElement;
    if (!n.textContent.trim() || !el || !el.getClientRects().length) continue;
    checked += 1;
    const style = getComputedStyle(el);
    const fg = rgb(style.color).slice(0, 3);
    const [a, b] = [lum(fg), lum(background(el))].sort((x, y) => y - x);
    const ratio = (a + 0.05) / (b + 0.05);
    const size = parseFloat(style.fontSize), bold = Number(style.fontWeight) >= 700;
    const need = size >= 24 || (bold && size >= 18.66) ? 3 : 4.5;
    if (ratio < need) bad.push({text: n.textContent.trim().slice(0, 40), ratio: Math.round(ratio * 100) / 100, need});
  }
  return {checked, bad};
}"""
