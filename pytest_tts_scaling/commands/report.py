"""`tts-bench report ARTIFACT… [--output FILE]`: a self-contained HTML page of committed artifacts.

Offline: renders what the artifacts hold (a plan's surge is recomputed from the qmax and ttotal
artifacts it names, where they lie beside it). Exit 0, or 2 for a missing or bad artifact.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pytest_tts_scaling.option_table import add_to_argparse, specs_named


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "report",
        help="render qmax, ttotal or plan artifacts as a self-contained HTML page",
        description="Render committed artifacts (qmax, ttotal, plan; told apart by their schema "
        "field) as HTML: the answer first (Q_max, T_total or the plan's verdict, and whether to "
        "trust it), plots at full width, the long tables below. One artifact gives one page; "
        "several give one page per artifact beside --output and a page with every answer at "
        "--output. Offline: calls nothing.",
    )
    parser.add_argument(
        "artifacts", type=Path, nargs="+", metavar="ARTIFACT", help="Artifact files (JSON)."
    )
    parser.add_argument(
        "--output",
        "-o",
        type=Path,
        default=None,
        metavar="FILE",
        help="Where the page is written. Default: the first artifact's name with .html, in "
        "--artifacts-dir (never beside a committed example).",
    )
    parser.add_argument(
        "--screenshot",
        type=Path,
        default=None,
        metavar="PNG",
        help="Also open the page in headless Chromium at 1400x900 and save what the first "
        "screen shows, without scrolling; a bare file name goes beside the page. Default: none.",
    )
    add_to_argparse(parser, specs_named("--artifacts-dir"))
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pytest_tts_scaling.artifacts import write_atomic
    from pytest_tts_scaling.report.extras import render
    from pytest_tts_scaling.report.pages import answer_html, load_shown, view_for, write_page

    views = [view_for(load_shown(path)) for path in args.artifacts]
    output: Path = (
        args.output or args.tts_artifacts_dir / args.artifacts[0].with_suffix(".html").name
    )
    if len(views) == 1:
        print(f"report: {write_page(views[0], output)}")
        return _screenshot(output, args.screenshot)
    for view in views:
        print(f"report: {write_page(view, output.parent / view.page)}")
    write_atomic(
        output,
        render(
            "index.html.j2",
            answer=answer_html(views, base=output.parent, pages=True),
            title=", ".join(v.headline for v in views),
        ),
    )
    print(f"report: {output}")
    return _screenshot(output, args.screenshot)


def _screenshot(page: Path, png: Path | None) -> int:
    if png is None:
        return 0
    if png.parent == Path():  # a bare name: beside the page, not in the working directory
        png = page.parent / png
    from pytest_tts_scaling.report.browser import first_screen

    screen = first_screen(page, png)
    width, height = screen.viewport
    seen = [text for text, box in screen.headlines if screen.visible(box)]
    plots = [p.key for p in screen.plots if p.loaded and screen.visible(p.box)]
    print(
        f"screenshot: {png} ({width}x{height}, first screen shows "
        f"{'; '.join(seen) or 'no answer'}; plots {', '.join(plots) or 'none'})"
    )
    return 0
