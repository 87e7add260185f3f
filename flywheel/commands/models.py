"""`flywheel models list|show|promote|canary|rollback`: model versions and serving channels.

Reads the history on `models.versions` and the pointers on `models.channels` (DESIGN §3, §4);
`promote`, `canary` and `rollback` write there, and every serving replica follows.
"""

from __future__ import annotations

import getpass
import socket
from datetime import UTC
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from contracts.advantages import GROUP_REWARD_FN
from flywheel.clients import codec
from flywheel.console import err, out
from flywheel.settings import Settings
from flywheel.tables import Column, json_option, note, print_records
from model_registry.registry import ModelRegistry, VersionState
from policies.policy import FALLBACK_VERSION
from schemas.enums import Channel
from schemas.events import ChannelPointer, ModelVersionEvent

model_option = click.option(
    "--model",
    "model_name",
    default=None,
    help="Name of the model (the models.versions key). Default: the model whose latest version "
    "was registered last (named on stderr).",
)


def _registry() -> ModelRegistry:
    settings = Settings.from_env()
    operator = f"cli/{getpass.getuser()}@{socket.gethostname()}"
    return ModelRegistry(settings.kafka_client_config(), codec(settings), producer=operator)


def _chosen(registry: ModelRegistry, model_name: str | None) -> str:
    """``model_name``, or else the most recently registered model (said on stderr): the one a
    user just trained (every demo trains a fresh ``gate-<run>``)."""
    if model_name is not None:
        return model_name
    name = registry.latest_model()
    if name is None:
        raise click.ClickException(
            "no model versions are registered yet; train one (`flywheel learn`, "
            "`flywheel demo`) or name one with --model"
        )
    err.print(f"model {name} (the most recently registered; --model to choose another)")
    return name


@click.group()
def models() -> None:
    """Model versions and where they serve: list, show, promote, canary, rollback.

    Without --model, show, promote, canary and rollback act on the most recently registered
    model, and list lists every model.
    """


# Columns per model kind (docs/models.md): the gate's check is an off-policy estimate, the
# agent's its eval suite's pass@1.
COMMON_COLUMNS = (
    Column("model"), Column("version", "v"), Column("parent"), Column("state"),
)  # fmt: skip
KIND_COLUMNS = {
    "gate": (Column("dr", "DR [lower]", text=lambda e: _estimate(*e) if e else "-"),),
    "agent": (
        Column("pass_at_1", "pass@1", text=lambda p: "-" if p is None else f"{p:.1%}"),
        Column("pass_lift", "lift [lower]", text=lambda e: _estimate(*e) if e else "-"),
    ),
}
TAIL_COLUMNS = (Column("registered"), Column("channels"), Column("reason"))


@models.command("list")
@click.option(
    "--model",
    "model_name",
    default=None,
    help="Only this model (the models.versions key). Default: every registered model.",
)
@json_option
def list_(model_name: str | None, as_json: bool) -> None:
    """Every version of every model (or of --model): latest state, its check, registration
    time (ISO 8601, UTC), channels. A table per model on a terminal; one line per version when
    piped; --json for scripts."""
    registry = _registry()
    names = [model_name] if model_name is not None else registry.model_names()
    if not names:
        note(
            "no model versions are registered yet; a model serves its fallback "
            f"v{FALLBACK_VERSION} until the learner registers one (`flywheel learn`, "
            "`flywheel demo`).",
            as_json=as_json,
        )
    listings = [_listing(registry, name) for name in names]
    if as_json:
        print_records([r for _, _, records, _ in listings for r in records], (), as_json=True)
        return
    for name, kind, records, summary in listings:
        if not records:
            note(
                f"no versions of {name} are registered yet; it serves the fallback "
                f"v{FALLBACK_VERSION}. The learner registers versions (`flywheel learn`).",
            )
            continue
        columns = (*COMMON_COLUMNS, *KIND_COLUMNS[kind], *TAIL_COLUMNS)
        print_records(records, columns, as_json=False, title=f"{name} versions ({kind})")
        note(summary)


def _listing(
    registry: ModelRegistry, model_name: str
) -> tuple[str, str, list[dict[str, Any]], str]:
    """(name, kind, one record per version, the channel summary) of one model."""
    versions = registry.versions(model_name)
    pointers = registry.channels(model_name)
    on = _channels_by_version(pointers)
    kind = _kind(versions)
    records = []
    for state in versions.values():
        latest = state.latest
        record: dict[str, Any] = {
            "model": model_name, "kind": kind, "version": state.version,
            "parent": state.parent_version, "state": state.status.value,
        }  # fmt: skip
        if kind == "gate":
            record["dr"] = (
                None if latest.ope_dr_value is None else [latest.ope_dr_value, latest.ope_dr_lower]
            )
        else:
            metrics = _latest_metrics(state)
            record["pass_at_1"] = metrics.get(PASS_AT_1)
            lift = metrics.get(PASS_LIFT)
            record["pass_lift"] = None if lift is None else [lift, metrics.get(PASS_LIFT_LOWER)]
        record |= {
            "registered": state.registered_at.astimezone(UTC),
            "channels": on.get(state.version, []),
            "reason": latest.reason or None,
        }
        records.append(record)
    return model_name, kind, records, _channel_summary(pointers)


# The agent recipes' metric names (learner/recipes/agent_*: eval suite results).
PASS_AT_1, PASS_LIFT, PASS_LIFT_LOWER = "eval_pass_at_1", "eval_pass_lift", "eval_pass_lift_lower"


def _kind(versions: dict[int, VersionState]) -> str:
    """``agent`` when a version carries the eval suite's pass@1 or trains on group advantages,
    else ``gate``."""
    for state in versions.values():
        if state.events[0].reward_fn == GROUP_REWARD_FN or PASS_AT_1 in _latest_metrics(state):
            return "agent"
    return "gate"


def _latest_metrics(state: VersionState) -> dict[str, float]:
    """The newest value of each metric over a version's events (steps may carry none)."""
    metrics: dict[str, float] = {}
    for event in state.events:
        metrics |= event.metrics
    return metrics


@models.command()
@click.argument("version", type=int)
@model_option
def show(version: int, model_name: str | None) -> None:
    """VERSION's facts (artifact, training window, metrics, estimates) and history."""
    registry = _registry()
    model_name = _chosen(registry, model_name)
    state = registry.version(model_name, version)
    facts = Table(title=f"{model_name} v{version}", show_header=False)
    facts.add_column("field", no_wrap=True)
    facts.add_column("value", overflow="fold")  # URIs and hashes whole, folded
    for name, value in _facts(state, registry.channels(model_name)):
        facts.add_row(escape(name), escape(value))
    out.print(facts)
    history = Table("time", "event", "producer", "reason", title="history")
    for event in state.events:
        history.add_row(
            event.event_time.astimezone(UTC).isoformat(timespec="seconds"),
            event.event_type.value,
            escape(event.producer),
            escape(event.reason or ""),
        )
    out.print(history)


@models.command()
@click.argument("version", type=int)
@model_option
@click.option(
    "--reason", help="Why (recorded on the PROMOTED event). Default: 'promoted by an operator'."
)
def promote(version: int, model_name: str | None, reason: str | None) -> None:
    """Point production at VERSION (every replica loads it) and end any canary."""
    registry = _registry()
    model_name = _chosen(registry, model_name)
    before = registry.channels(model_name).get(Channel.PRODUCTION)
    registry.promote(model_name, version, reason=reason or "promoted by an operator")
    out.print(f"{model_name}: production → v{version} (was {_version_of(before)})")


@models.command()
@click.argument("version", type=int)
@model_option
@click.option(
    "--fraction",
    type=click.FloatRange(0.0, 1.0, min_open=True),
    default=0.1,
    show_default=True,
    help="Share of users routed to the canary, by a stable hash of user_id.",
)
@click.option("--reason", help="Why (recorded on the CANARY_STARTED event).")
def canary(version: int, model_name: str | None, fraction: float, reason: str | None) -> None:
    """Route a stable FRACTION of users to VERSION as a canary."""
    registry = _registry()
    model_name = _chosen(registry, model_name)
    registry.start_canary(model_name, version, fraction, reason=reason)
    out.print(f"{model_name}: canary → v{version} for {fraction:.1%} of users")


@models.command()
@model_option
@click.option("--reason", help="Why (recorded on the ROLLED_BACK event).")
@click.option(
    "--to-fallback",
    is_flag=True,
    help=f"Allow returning to the fallback v{FALLBACK_VERSION} when the version has no parent.",
)
def rollback(model_name: str | None, reason: str | None, to_fallback: bool) -> None:
    """Point production back at the parent of the version it serves."""
    registry = _registry()
    model_name = _chosen(registry, model_name)
    before = registry.channels(model_name).get(Channel.PRODUCTION)
    after = registry.rollback(model_name, reason=reason, to_fallback=to_fallback)
    target = f"v{after.version}" if after else f"the fallback v{FALLBACK_VERSION}"
    out.print(f"{model_name}: production → {target} (rolled back from {_version_of(before)})")


def _facts(state: VersionState, pointers: dict[Channel, ChannelPointer]) -> list[tuple[str, str]]:
    latest: ModelVersionEvent = state.latest
    window = latest.training_window
    on = _channels_by_version(pointers).get(state.version, [])
    rows = [
        ("state", state.status.value),
        ("channels", ", ".join(on) or "-"),
        ("parent", _maybe(state.parent_version)),
        ("artifact", state.artifact.uri),
        ("sha256", state.artifact.sha256),
        ("reward_fn", latest.reward_fn),
        ("mds windows", f"{window.mds_dataset}: {', '.join(window.mds_windows)}"
                        if window.mds_dataset else "-"),
        ("lake ranges", str(len(window.lake_ranges))),
        ("DR value [lower, upper]", _estimate(latest.ope_dr_value, latest.ope_dr_lower,
                                              latest.ope_dr_upper)),
        ("SNIPS value [lower, upper]", _estimate(latest.ope_snips_value, latest.ope_snips_lower,
                                                 latest.ope_snips_upper)),
        ("baseline value", _maybe(latest.ope_baseline_value)),
        ("effective sample size", _maybe(latest.ope_effective_sample_size)),
    ]  # fmt: skip
    rows += [(f"metric {k}", f"{v:.6g}") for k, v in sorted(latest.metrics.items())]
    return rows


def _channels_by_version(pointers: dict[Channel, ChannelPointer]) -> dict[int, list[str]]:
    on: dict[int, list[str]] = {}
    for channel, pointer in sorted(pointers.items()):
        label = channel.value.lower()
        if channel is Channel.CANARY:
            label += f" {pointer.traffic_fraction:.0%}"
        on.setdefault(pointer.version, []).append(label)
    return on


def _channel_summary(pointers: dict[Channel, ChannelPointer]) -> str:
    production = pointers.get(Channel.PRODUCTION)
    line = f"production: {_version_of(production)}"
    if production is None:
        line += " (the fallback: nothing promoted yet)"
    canary = pointers.get(Channel.CANARY)
    if canary is not None:
        line += f" · canary: v{canary.version} for {canary.traffic_fraction:.1%} of users"
    return line


def _version_of(pointer: ChannelPointer | None) -> str:
    return f"v{pointer.version}" if pointer else f"v{FALLBACK_VERSION}"


def _maybe(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"


def _estimate(value: float | None, lower: float | None, upper: float | None = None) -> str:
    if value is None:
        return "-"
    bounds = [f"{b:.4g}" for b in (lower, upper) if b is not None]
    return f"{value:.4g} [{', '.join(bounds)}]" if bounds else f"{value:.4g}"
