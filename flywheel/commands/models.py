"""`flywheel models list|show|promote|canary|rollback`: model versions and serving channels.

Reads the history on `models.versions` and the pointers on `models.channels` (DESIGN §3, §4);
`promote`, `canary` and `rollback` write there, and every serving replica follows.
"""

from __future__ import annotations

import getpass
import socket

import click
from rich import box
from rich.markup import escape
from rich.table import Table

from flywheel.clients import codec
from flywheel.console import out
from flywheel.settings import Settings
from model_registry.registry import ModelRegistry, VersionState
from policies.policy import FALLBACK_VERSION
from schemas.enums import Channel
from schemas.events import ChannelPointer, ModelVersionEvent

DEFAULT_MODEL = "suggestion-gate"

model_option = click.option(
    "--model",
    "model_name",
    default=DEFAULT_MODEL,
    show_default=True,
    help="Name of the model (the models.versions key).",
)


def _registry() -> ModelRegistry:
    settings = Settings.from_env()
    operator = f"cli/{getpass.getuser()}@{socket.gethostname()}"
    return ModelRegistry(settings.kafka_client_config(), codec(settings), producer=operator)


@click.group()
def models() -> None:
    """Model versions and where they serve: list, show, promote, canary, rollback."""


@models.command("list")
@click.option(
    "--model",
    "model_name",
    default=None,
    help="Only this model (the models.versions key). Default: every registered model.",
)
def list_(model_name: str | None) -> None:
    """Every version of every model (or of --model): latest state, channels, check estimate."""
    registry = _registry()
    names = [model_name] if model_name is not None else registry.model_names()
    if not names:
        out.print(
            "no model versions are registered yet; a model serves its fallback "
            f"v{FALLBACK_VERSION} until the learner registers one (`flywheel learn`, "
            "`flywheel demo`)."
        )
        return
    for name in names:
        _print_versions(registry, name)


def _print_versions(registry: ModelRegistry, model_name: str) -> None:
    versions = registry.versions(model_name)
    pointers = registry.channels(model_name)
    if not versions:
        out.print(
            f"no versions of {model_name} are registered yet; it serves the fallback "
            f"v{FALLBACK_VERSION}. The learner registers versions (`flywheel learn`)."
        )
        return
    on = _channels_by_version(pointers)
    table = Table(title=f"{model_name} versions", box=box.SIMPLE_HEAD)
    for name in ("v", "parent", "state", "DR \\[lower]", "registered"):
        table.add_column(name, no_wrap=True)
    table.add_column("channels", min_width=10)
    table.add_column("reason", min_width=10, overflow="fold")
    for state in versions.values():
        latest = state.latest
        table.add_row(
            str(state.version),
            _maybe(state.parent_version),
            state.status.value,
            _estimate(latest.ope_dr_value, latest.ope_dr_lower),
            f"{state.registered_at:%m-%d %H:%M}",
            ", ".join(on.get(state.version, [])) or "-",
            escape(latest.reason or ""),
        )
    out.print(table)
    out.print(_channel_summary(pointers))


@models.command()
@click.argument("version", type=int)
@model_option
def show(version: int, model_name: str) -> None:
    """One version's facts (artifact, training window, metrics, estimates) and history."""
    registry = _registry()
    state = registry.version(model_name, version)
    facts = Table(title=f"{model_name} v{version}", show_header=False)
    facts.add_column("field", no_wrap=True)
    facts.add_column("value", overflow="fold")  # URIs and hashes whole, folded
    for name, value in _facts(state, registry.channels(model_name)):
        facts.add_row(escape(name), escape(value))
    out.print(facts)
    history = Table("time (UTC)", "event", "producer", "reason", title="history")
    for event in state.events:
        history.add_row(
            f"{event.event_time:%Y-%m-%d %H:%M:%S}",
            event.event_type.value,
            escape(event.producer),
            escape(event.reason or ""),
        )
    out.print(history)


@models.command()
@click.argument("version", type=int)
@model_option
@click.option("--reason", help="Why (recorded on the PROMOTED event).")
def promote(version: int, model_name: str, reason: str | None) -> None:
    """Point production at VERSION (every replica loads it) and end any canary."""
    registry = _registry()
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
def canary(version: int, model_name: str, fraction: float, reason: str | None) -> None:
    """Route a stable FRACTION of users to VERSION as a canary."""
    _registry().start_canary(model_name, version, fraction, reason=reason)
    out.print(f"{model_name}: canary → v{version} for {fraction:.1%} of users")


@models.command()
@model_option
@click.option("--reason", help="Why (recorded on the ROLLED_BACK event).")
@click.option(
    "--to-fallback",
    is_flag=True,
    help=f"Allow returning to the fallback v{FALLBACK_VERSION} when the version has no parent.",
)
def rollback(model_name: str, reason: str | None, to_fallback: bool) -> None:
    """Point production back at the parent of the version it serves."""
    registry = _registry()
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
