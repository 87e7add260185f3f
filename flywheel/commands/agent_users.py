"""`flywheel agent-users`: simulated users of the agent model's API (simulator/agent_users.py)."""

from __future__ import annotations

import threading

import click

from environments.episodes import EpisodeLimits
from environments.program_synthesis import NAME as PROGRAM_SYNTHESIS
from environments.repository.spec import NAME as REPOSITORY
from flywheel.clients import telemetry_client
from flywheel.commands.serve import DEFAULT_PORT
from flywheel.console import err, out
from flywheel.isolation import require_model_code_isolation
from flywheel.options import status_every_option
from flywheel.settings import Settings
from flywheel.signals import stop_on_signals

AGENT_USER_ENVIRONMENTS = (REPOSITORY, PROGRAM_SYNTHESIS)


@click.command("agent-users")
@click.option(
    "--url",
    default=f"http://127.0.0.1:{DEFAULT_PORT}",
    show_default=True,
    help="Base URL of the OpenAI-compatible API (`flywheel serve --kind agent`).",
)
@click.option(
    "--api-key",
    envvar="FLYWHEEL_API_KEY",
    default=None,
    help="Bearer key (env FLYWHEEL_API_KEY); none for a server run with --no-auth.",
)
@click.option("--model", default="agent-lm", show_default=True, help="Agent model to ask.")
@click.option("--env", "environment", default=REPOSITORY, show_default=True,
              type=click.Choice(AGENT_USER_ENVIRONMENTS),
              help="What the users work on: repository (multi-turn tool sessions) or "
              "program-synthesis (one completion per request).")  # fmt: skip
@click.option(
    "--users", default=16, show_default=True, type=click.IntRange(1), help="Simulated users."
)
@click.option("--rate", default=2.0, show_default=True, type=click.FloatRange(min=0.01),
              help="Requests (repository: sessions) per second, all users together.")  # fmt: skip
@click.option("--concurrency", default=4, show_default=True, type=click.IntRange(1, 256),
              help="Requests (sessions) in flight at once (the server batches them).")  # fmt: skip
@click.option("--temperature", default=1.0, show_default=True, type=click.FloatRange(min=0),
              help="Sampling temperature asked for (0: greedy).")  # fmt: skip
@click.option("--max-tokens", default=24, show_default=True, type=click.IntRange(1, 4096),
              help="Most tokens generated per completion (per turn of a session).")  # fmt: skip
@click.option("--max-turns", default=EpisodeLimits.max_turns, show_default=True,
              type=click.IntRange(1, 1024),
              help="Most turns (tool calls) of a repository session.")  # fmt: skip
@click.option("--max-requests", default=None, type=click.IntRange(1),
              help="Stop after this many requests (repository: sessions). Default: run until "
              "stopped.")  # fmt: skip
@click.option("--seed", default=0, show_default=True, type=int,
              help="Seed of the users' choices.")  # fmt: skip
@click.option("--name", default="agent-users", show_default=True,
              help="Names the users, sessions and the SDK spool.")  # fmt: skip
@status_every_option(15.0)
def agent_users(
    url: str,
    api_key: str | None,
    model: str,
    environment: str,
    users: int,
    rate: float,
    concurrency: int,
    temperature: float,
    max_tokens: int,
    max_turns: int,
    max_requests: int | None,
    seed: int,
    name: str,
    status_every_s: float,
) -> None:
    """Simulated developers using the agent model through its API, reacting to what it wrote.

    With --env repository each user runs tool sessions on their own copy of a training
    repository: /v1/chat/completions with the tools, every returned tool call executed locally
    and its output sent back (tool_call_id), until MODEL submits (or --max-turns, or the context
    is full). With --env program-synthesis each request asks MODEL to write the function of a
    training task. The task's hidden tests (run in the sandbox) decide the reaction: accepted /
    tests passed / edit persisted, accepted with failing tests, or reverted and a dissatisfied
    follow-up; some are ignored. Reactions are AgentFeedback events (agent.feedback, through the
    SDK) naming the completion (a session's last one, which trains the whole session) that the
    joiner turns into agent_use@1 Rewards.
    """
    from simulator.agent_users import AgentUsers, AgentUsersConfig

    settings = Settings.from_env()
    require_model_code_isolation("agent-users")  # the hidden tests run what the model wrote
    config = AgentUsersConfig(
        model=model, environment=environment, users=users, rate_per_s=rate,
        concurrency=concurrency, temperature=temperature, max_tokens=max_tokens,
        limits=EpisodeLimits(max_turns=max_turns), seed=seed,
    )  # fmt: skip
    client = telemetry_client(settings, name)
    sim = AgentUsers(config, url, client.agent_feedback, api_key=api_key, name=name)
    stop = stop_on_signals()
    unit = "sessions" if environment == REPOSITORY else "requests"
    out.print(f"[green]agent-users[/] {users} users of {model} at {url} ({environment}), "
              f"{rate:g} {unit}/s; Ctrl-C to stop")  # fmt: skip
    runner = threading.Thread(target=sim.run, args=(stop, max_requests), daemon=True)
    runner.start()
    try:
        while runner.is_alive():
            runner.join(status_every_s)
            err.print(sim.stats.line(), highlight=False)
    finally:
        stop.set()
        runner.join()
        sim.close()
        client.close()
    out.print(f"agent-users stopped: {sim.stats.line()}")
