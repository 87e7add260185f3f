"""The report page: one self-contained HTML file beside its PNG plots (opens from disk).

A small script marks every plot ``data-loaded="true"`` once the browser has decoded it, so a
headless browser test can check that the plots really render, not only that tags exist.
"""

from __future__ import annotations

import html
from pathlib import Path

from flywheel.demo.results import RunResults, VersionResult
from flywheel.report.plots import PLOTS

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 960px; color: #222; }
table { border-collapse: collapse; font-size: 0.9rem; }
th, td { border-bottom: 1px solid #ddd; padding: 0.3rem 0.6rem; text-align: right; }
th:first-child, td:first-child, td.text { text-align: left; }
.headline { font-size: 1.2rem; background: #f4f8f4; padding: 0.8rem; border-radius: 6px; }
img { max-width: 100%; margin: 1rem 0; }
"""
_MARK_LOADED = """
window.addEventListener("load", () => {
  for (const img of document.images) {
    img.dataset.loaded = String(img.complete && img.naturalWidth > 0);
  }
  document.body.dataset.ready = "true";
});
"""
COLUMNS = (
    "version",
    "parent",
    "requests",
    "shown / 1k",
    "accept rate",
    "reward / req",
    "gate estimate",
    "gate lower",
    "baseline",
    "decision",
    "data → live (s)",
)


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def version_cells(v: VersionResult) -> list[str]:
    """One result-table row as text (shared by the terminal table and the HTML page)."""
    return [
        f"v{v.version}",
        "-" if v.parent_version is None else f"v{v.parent_version}",
        f"{v.requests:,}",
        _num(v.shown_per_1000 if v.requests else None, ".0f"),
        _num(v.accept_rate if v.requests else None, ".3f"),
        _num(v.reward_per_request if v.requests else None, ".4f"),
        _num(v.gate_estimate, ".4f"),
        _num(v.gate_lower, ".4f"),
        _num(v.gate_baseline, ".4f"),
        v.decision,
        _num(v.data_to_live_s, ".0f"),
    ]


def headline_text(results: RunResults) -> str:
    change = results.headline()
    final = results.final_production
    if change is None or final is None:
        return "No version has served enough requests for a comparison yet."
    shown, accept = change
    return (
        f"Final production v{final.version} vs v0: suggestions shown per 1,000 requests "
        f"{shown:+.1%}, accept rate {accept:+.1%}."
    )


def _table(results: RunResults) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
    rows = []
    for v in results.versions:
        cells = version_cells(v)
        title = html.escape(v.reason or "", quote=True)
        tds = "".join(
            f'<td class="text" title="{title}">{html.escape(c)}</td>'
            if i == 9
            else f"<td>{html.escape(c)}</td>"
            for i, c in enumerate(cells)
        )
        rows.append(f"<tr>{tds}</tr>")
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def write_report(results: RunResults, out_dir: Path) -> Path:
    """Write ``index.html`` and its PNGs into ``out_dir``; returns the HTML path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    images = []
    for name, plot in PLOTS.items():
        png = plot(results, out_dir / f"{name}.png")
        images.append(f'<img src="{png.name}" alt="{name} plot" data-plot="{name}">')
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>Flywheel demo {html.escape(results.run_id)}</title>
<style>{_STYLE}</style><script>{_MARK_LOADED}</script></head>
<body>
<h1>Flywheel closed loop: run {html.escape(results.run_id)}</h1>
<p>Model <code>{html.escape(results.model_name)}</code>,
started {html.escape(results.started_at)}, {results.elapsed_s / 60:.1f} minutes,
simulator config <code>{html.escape(results.config)}</code>.</p>
<p class="headline">{html.escape(headline_text(results))}</p>
<h2>Versions</h2>
{_table(results)}
<p>Realised values are the simulator's ground truth for the requests each version served;
gate numbers are the off-policy estimates on held-out data recorded in
<code>models.versions</code>.</p>
<h2>Plots</h2>
{"".join(images)}
</body></html>
"""
    path = out_dir / "index.html"
    path.write_text(page, encoding="utf-8")
    return path
