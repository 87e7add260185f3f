"""The report page: one self-contained HTML file beside its PNG plots (opens from disk).

A small script marks every plot ``data-loaded="true"`` once the browser has decoded it, so a
headless browser test can check that the plots really render, not only that tags exist.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from flywheel.demo.results import AgentVersionResult, RunResults, VersionResult
from flywheel.report.plots import AGENT_PLOTS, PLOTS

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 960px; color: #222; }
table { border-collapse: collapse; font-size: 0.9rem; }
th, td { border-bottom: 1px solid #ddd; padding: 0.3rem 0.6rem; text-align: right; }
th:first-child, td:first-child, td.text { text-align: left; }
.headline { font-size: 1.2rem; background: #f4f8f4; padding: 0.8rem; border-radius: 6px; }
img { max-width: 100%; margin: 1rem 0; }
ol.episode pre { background: #f6f6f6; padding: 0.4rem; margin: 0.2rem 0 0.6rem; font-size: 0.8rem; }
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
    "gate interval",
    "paired lower",
    "baseline",
    "decision",
    "data → live (s)",
)


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _interval(low: float | None, high: float | None) -> str:
    return "-" if low is None or high is None else f"[{low:.4f}, {high:.4f}]"


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
        _interval(v.gate_interval_low, v.gate_interval_high),
        _num(v.gate_lower, ".4f"),
        _num(v.gate_baseline, ".4f"),
        v.decision,
        _num(v.data_to_live_s, ".0f"),
    ]


AGENT_COLUMNS = (
    "version",
    "parent",
    "eval pass@1",
    "pass@1 lower",
    "by level",
    "held-out 2",
    "online reward",
    "trials",
    "tokens trained",
    "served share",
    "served reward (n)",
    "stale",
    "data → live (s)",
    "decision",
)


def agent_cells(v: AgentVersionResult) -> list[str]:
    """One agent result row as text (terminal table and HTML page)."""
    return [
        f"v{v.version}",
        "-" if v.parent_version is None else f"v{v.parent_version}",
        _num(v.eval_pass_at_1, ".1%"),
        _num(v.eval_pass_lower, ".1%"),
        " ".join(f"L{k} {r:.0%}" for k, r in v.level_pass_at_1.items()) or "-",
        _num(v.extra_pass_at_1, ".1%"),
        _num(v.online_reward, ".3f"),
        f"{v.trials:,}",
        f"{v.train_tokens:,}",
        _num(v.served_share, ".0%"),
        f"{_num(v.served_reward, '.3f')} ({v.served:,})",
        f"{v.stale_rows:,}",
        _num(v.data_to_live_s, ".0f"),
        v.decision,
    ]


def agent_headline_text(results: RunResults) -> str:
    versions = results.agent_versions
    trained = sum(v.train_rows for v in versions)
    share = sum(v.served_rows for v in versions) / trained if trained else 0.0
    reacted = sum(v.served for v in versions)
    served = (
        f" Served to users: {reacted:,} reacted sessions (or completions), "
        f"{share:.0%} of the {trained:,} rows trained on."
    )
    pair = results.agent_headline()
    if pair is None:
        tried = len(versions) - 1
        return (f"Agent: no RL version promoted ({max(tried, 0)} candidate(s) decided); "
                f"production stays the warm-up.{served}")  # fmt: skip
    first, best = pair
    lift = (best.eval_pass_at_1 or 0.0) - (first.eval_pass_at_1 or 0.0)
    return (
        f"Agent: best promoted v{best.version} eval pass@1 {best.eval_pass_at_1:.1%} vs "
        f"v{first.version} {first.eval_pass_at_1:.1%} ({lift * 100:+.1f} points).{served}"
    )


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


def _table(columns: tuple[str, ...], rows: list[tuple[list[str], str | None]]) -> str:
    """An HTML table of ``rows`` (cells, reason); the reason is the decision cell's tooltip."""
    reason_column = columns.index("decision")
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = []
    for cells, reason in rows:
        title = html.escape(reason or "", quote=True)
        tds = "".join(
            f'<td class="text" title="{title}">{html.escape(c)}</td>'
            if i == reason_column
            else f"<td>{html.escape(c)}</td>"
            for i, c in enumerate(cells)
        )
        body.append(f"<tr>{tds}</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def pass_at_k_text(results: RunResults) -> str:
    """``v1 pass@1 9.8% pass@8 31.2% → v5 pass@1 14.1% pass@8 35.0% (32 held-out tasks)``."""
    rows = results.agent_pass_at_k
    if not rows:
        return ""
    parts = [f"v{int(r['version'])} "
             + " ".join(f"{k} {r[k]:.1%}" for k in r if k.startswith("pass@"))
             for r in rows]  # fmt: skip
    return " → ".join(parts) + f" ({int(rows[0]['tasks'])} held-out tasks, sampled)"


def _episode_section(episode: dict[str, Any] | None) -> str:
    if not episode:
        return ""
    verdict = "solved" if episode["passed"] else "not solved"
    turns = "".join(
        f"<li><code>{html.escape(t['call'])}</code>"
        + (f"<pre>{html.escape(t['observation'])}</pre>" if t["observation"] else "")
        + "</li>"
        for t in episode["turns"]
    )
    return f"""<h3>One held-out episode of v{episode["version"]}, turn by turn</h3>
<p>Task <code>{html.escape(episode["task_id"])}</code> (level {episode["level"]}):
{html.escape(episode["user"])} — {verdict}, hidden tests {html.escape(episode["tests"])},
reward {episode["reward"]:.2f}, ended by {html.escape(episode["ended"])}.</p>
<ol class="episode">{turns}</ol>"""


def _agent_section(results: RunResults) -> str:
    if not results.agent_versions:
        return ""
    rows = [(agent_cells(v), v.reason) for v in results.agent_versions]
    passk = pass_at_k_text(results)
    second = results.agent_extra_eval or "the environment's second held-out set"
    env = f" in <code>{html.escape(results.agent_env)}</code>" if results.agent_env else ""
    return f"""<h2>Agent loop (<code>{html.escape(results.agent_model or "")}</code>){env}</h2>
<p class="headline">{html.escape(agent_headline_text(results))}</p>
{_table(AGENT_COLUMNS, rows)}
<p>Eval pass@1 is greedy decoding on the held-out eval suite (never in a training pool),
paired against production; its lower bound is production's pass@1 plus the lift's bootstrap
lower bound (clustered: by template, by program). "By level" splits it by difficulty;
"held-out 2" is pass@1 on {html.escape(second)}, reported, never deciding. The online reward is
the mean reward of the trials each version sampled on the rollout workers.</p>
{f'<p class="headline">Sampled: {html.escape(passk)}</p>' if passk else ""}
{_episode_section(results.agent_episode)}"""


def write_report(results: RunResults, out_dir: Path) -> Path:
    """Write ``index.html`` and its PNGs into ``out_dir``; returns the HTML path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    images = []
    plots = {**(PLOTS if results.versions else {}),
             **(AGENT_PLOTS if results.agent_versions else {})}  # fmt: skip
    for name, plot in plots.items():
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
{_table(COLUMNS, [(version_cells(v), v.reason) for v in results.versions])}
<p>Realised values are the simulator's ground truth for the requests each version served;
gate numbers are the off-policy estimates on held-out data recorded in
<code>models.versions</code>.</p>
{_agent_section(results)}
<h2>Plots</h2>
{"".join(images)}
</body></html>
"""
    path = out_dir / "index.html"
    path.write_text(page, encoding="utf-8")
    return path
