"""A report as a person first sees it: headless Chromium opens it, no click, and we measure.

Playwright drives Debian's ``chromium`` (no browser download: ``playwright install`` cannot
reach its servers here). Imported only by what looks at pages: the browser test and
``tts-bench report --screenshot``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_tts_scaling.errors import InputError

CHROMIUM = os.environ.get("TTS_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)
VIEWPORT = (1400, 900)

# Boxes of the answer's headlines and plots, in CSS pixels of the first viewport.
_MEASURE = """() => {
  const box = (e) => { const r = e.getBoundingClientRect(); return [r.x, r.y, r.width, r.height]; };
  return {
    headlines: [...document.querySelectorAll('.tts-answer [data-role=headline]')]
      .map((e) => [e.textContent, box(e)]),
    plots: [...document.querySelectorAll('.tts-answer figure[data-plot] img')]
      .map((e) => [e.closest('figure').dataset.plot, box(e), e.complete && e.naturalWidth > 0]),
    scrollY: window.scrollY,
  };
}"""


@dataclass(frozen=True)
class Box:
    x: float
    y: float
    width: float
    height: float

    def within(self, width: float, height: float) -> bool:
        """Wholly inside a viewport of this size, at the top of the page."""
        return (
            self.x >= 0
            and self.y >= 0
            and self.x + self.width <= width
            and self.y + self.height <= height
        )


@dataclass(frozen=True)
class Plot:
    key: str
    box: Box
    loaded: bool


@dataclass(frozen=True)
class FirstScreen:
    """What a 1400 x 900 window shows of a report before anyone scrolls or clicks."""

    viewport: tuple[int, int]
    headlines: list[tuple[str, Box]]
    plots: list[Plot]
    scroll_y: float
    requests: list[str]

    def visible(self, box: Box) -> bool:
        return box.within(*self.viewport)

    def plot(self, key: str) -> Plot:
        return next(p for p in self.plots if p.key == key)


def chromium_available() -> bool:
    return Path(CHROMIUM).is_file() and os.access(CHROMIUM, os.X_OK)


def first_screen(
    page: Path, screenshot: Path | None = None, viewport: tuple[int, int] = VIEWPORT
) -> FirstScreen:
    """Open `page` in headless Chromium, measure the answer, optionally save the first screen."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise InputError(
            "looking at a page needs the playwright package (pip install playwright)"
        ) from None
    if not chromium_available():
        raise InputError(
            f"looking at a page needs Chromium at {CHROMIUM} (apt-get install chromium, or set "
            "TTS_CHROMIUM)"
        )
    requests: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=list(CHROMIUM_ARGS), headless=True
        )
        try:
            tab = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]})
            tab.on("request", lambda request: requests.append(request.url))
            tab.goto(page.resolve().as_uri(), wait_until="load")
            measured: dict[str, Any] = tab.evaluate(_MEASURE)
            if screenshot is not None:
                screenshot.parent.mkdir(parents=True, exist_ok=True)
                tab.screenshot(path=str(screenshot))
        finally:
            browser.close()
    return FirstScreen(
        viewport=viewport,
        headlines=[(text, Box(*box)) for text, box in measured["headlines"]],
        plots=[Plot(key, Box(*box), loaded) for key, box, loaded in measured["plots"]],
        scroll_y=measured["scrollY"],
        requests=requests,
    )
