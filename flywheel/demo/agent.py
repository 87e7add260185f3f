"""The demo's agent loop: warm-up, rollout workers, serving, users, the RL learner — and its
result rows.

    flywheel learn --recipe agent-sft   the first version (v1; a finished warm-up with the same
                                        config is reused, so only the first demo pays for it)
    flywheel rollouts --from-pool …     groups of trials with production (and the canary): in the
                                        repository environment, episodes of tool calls
    flywheel serve --kind agent         the OpenAI API (tools): every completion an
                                        AgentCompletion
    flywheel agent-users                simulated users: repository tool sessions through the
                                        API (program synthesis: single completions), reacting
    flywheel learn --recipe agent       windows → GRPO → eval-suite check → canary → promote

The joiner turns complete groups into grpo@1 Rewards and served completions + reactions into
agent_use@1 Rewards; the sink lands trials, completions and Rewards in the lake, as for every
other topic; the learner trains on both (real-time RL). Per version the results keep the eval
suite's pass@1 and its lift's lower bound (from the ModelVersionEvents), the online trial reward
and trial count, the served completions' reward (from the lake), tokens trained and the share of
served rows in them, stale trials, data → live and the decision.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import analytics
from analytics.errors import EmptyLakeError
from contracts.advantages import DEFAULT_GROUP_SIZE
from environments import PROGRAM_SYNTHESIS, REPOSITORY
from environments.episodes import EpisodeLimits
from flywheel.demo.results import AgentVersionResult
from flywheel.demo.workers import WorkerSpec
from ground.store import Store
from learner.continuous import WINDOW_LAST_EVENT_METRIC
from learner.recipes.agent_rl.recipe import DEFAULT_AGENT_CONFIG, PROGRAM_SYNTHESIS_AGENT_CONFIG
from learner.recipes.agent_rl.windows import TRIALS, RowSource
from learner.recipes.agent_sft.recipe import DEFAULT_SFT_CONFIG, PROGRAM_SYNTHESIS_SFT_CONFIG
from model_registry.registry import DECIDED, VersionState
from policies.agent_sampling import SamplingParams
from schemas.enums import ModelEventType

LEVEL_METRIC = "eval_pass_at_1_level"  # learner.eval_suite.EvalResult.level_metrics
# Agent users' requests (repository: tool sessions of up to 8 turns) per second: a share of the
# CPU the rollout workers also need.
USERS_RATE_PER_S = {"repository": 0.1, "program-synthesis": 1.0}
# The rollout worker, the serving replica and the learner run torch side by side; each with a
# thread per core oversubscribes the cores, and OpenMP threads waiting on each other then
# spin: on 2 cores a 1,000-task eval beside a busy generator took 8x as long with 2 threads
# each as alone, 1.6x with 1 thread each. So they share the cores.
TORCH_PROCESSES = 3


def torch_threads_env(cpus: int | None = None) -> dict[str, str]:
    """The environment that gives each of the agent loop's torch processes its share of the
    cores (torch reads ``OMP_NUM_THREADS`` for its intra-op threads)."""
    threads = max(1, (cpus or os.cpu_count() or 1) // TORCH_PROCESSES)
    return {"OMP_NUM_THREADS": str(threads)}


# Per environment: the recipes' configs and the rollout worker's per-turn limits (the agent
# users' sessions ask for the same sampling, so their served tokens are on-policy).
_SFT_CONFIG = {REPOSITORY: DEFAULT_SFT_CONFIG, PROGRAM_SYNTHESIS: PROGRAM_SYNTHESIS_SFT_CONFIG}
_RL_CONFIG = {REPOSITORY: DEFAULT_AGENT_CONFIG, PROGRAM_SYNTHESIS: PROGRAM_SYNTHESIS_AGENT_CONFIG}
AGENT_ENVIRONMENTS = tuple(_SFT_CONFIG)
# The trials' sampling (program synthesis: the worker's defaults, tuned on it); an episode's
# turn is one tool call (64 tokens hold the longest edit) within the model's 512 positions.
TRIAL_SAMPLING = {
    REPOSITORY: SamplingParams(temperature=0.6, max_new_tokens=64),
    PROGRAM_SYNTHESIS: SamplingParams(temperature=0.4, max_new_tokens=24),
}
EPISODE_LIMITS = EpisodeLimits(max_turns=8, max_tokens=512)


def _trial_options(environment: str, *, context: bool = True) -> list[str]:
    """The rollout worker's (and, without ``context``, the agent users') sampling options."""
    sampling = TRIAL_SAMPLING[environment]
    options = ["--temperature", str(sampling.temperature),
               "--max-tokens", str(sampling.max_new_tokens)]  # fmt: skip
    if environment == REPOSITORY:
        options += ["--max-turns", str(EPISODE_LIMITS.max_turns)]
        if context:  # the API checks the users' context against the model's positions
            options += ["--max-context", str(EPISODE_LIMITS.max_tokens)]
    return options


def warm_up_spec(model_name: str, environment: str = REPOSITORY) -> WorkerSpec:
    args = ["learn", "--recipe", "agent-sft", "--model", model_name,
            "--config", str(_SFT_CONFIG[environment])]  # fmt: skip
    return WorkerSpec("agent-sft", args, finishes=True)


def agent_specs(
    model_name: str, versions: int, run_id: str, port: int, environment: str = REPOSITORY
) -> list[WorkerSpec]:
    """The rollout worker, the RL learner, a serving replica and its simulated users, started
    once the warm-up has registered v1."""
    # The joiner's group size, so that groups complete on their last trial (not by timeout).
    rollouts = [
        "rollouts", "--model", model_name, "--from-pool", environment,
        "--group-size", str(DEFAULT_GROUP_SIZE), "--group", f"demo-{run_id}.rollouts",
        "--status-every", "15s", *_trial_options(environment),
    ]  # fmt: skip
    learn = ["learn", "--recipe", "agent", "--model", model_name, "--max-versions",
             str(versions), "--config", str(_RL_CONFIG[environment])]  # fmt: skip
    threads = torch_threads_env()
    serve = ["serve", "--kind", "agent", "--model", model_name, "--port", str(port),
             "--no-auth", "--replica-id", f"demo-{run_id}-agent",
             "--status-every", "15s"]  # fmt: skip
    users = ["agent-users", "--url", f"http://127.0.0.1:{port}", "--model", model_name,
             "--env", environment, "--rate", str(USERS_RATE_PER_S[environment]),
             "--name", f"demo-{run_id}-users",
             *_trial_options(environment, context=False)]  # fmt: skip
    return [
        WorkerSpec("rollouts", rollouts, env=threads),
        WorkerSpec("agent-learner", learn, finishes=True, env=threads),
        WorkerSpec("agent-serve", serve, env=threads),
        WorkerSpec("agent-users", users),
    ]


def online_rewards(
    lake: Path | Store, model_name: str, source: RowSource = TRIALS
) -> dict[int, tuple[float, int]]:
    """Version → (mean reward, count) of ``model_name``'s Rewards of ``source`` in the lake (on
    disk or in a store; the catalog's `rewards` view: each Reward once): sandbox trials, or the
    served completions users reacted to (a tool session's last turn: its earlier turns carry no
    reaction of their own)."""
    try:
        con = analytics.connect(lake)
    except EmptyLakeError:
        return {}
    with con:
        views = {name for (name,) in con.execute("select view_name from duckdb_views()").fetchall()}
        if "rewards" not in views:
            return {}
        rows = con.execute(
            "select model_version, avg(reward), count(*) from rewards "
            "where model_name = $model and reward_fn = $fn "
            "and source = $source and (not $served or cardinality(reward_components) > 0) "
            "group by model_version",
            {"model": model_name, "fn": source.reward_fn, "source": source.reward_source,
             "served": source.reward_source == "COMPLETION"},
        ).fetchall()  # fmt: skip
    return {int(v): (float(mean), int(n)) for v, mean, n in rows}


def agent_version_results(
    states: Mapping[int, VersionState],
    online: Mapping[int, tuple[float, int]],
    served: Mapping[int, tuple[float, int]],
    started: float,
) -> list[AgentVersionResult]:
    """One row per registered agent version, in version order: ``online`` and ``served`` are
    :func:`online_rewards` of the trials and of the served completions."""
    rows = []
    for version, state in sorted(states.items()):
        metrics = state.latest.metrics
        reward, trials = online.get(version, (None, 0))
        served_reward, served_count = served.get(version, (None, 0))
        promoted = [e for e in state.events if e.event_type is ModelEventType.PROMOTED]
        last_ms = metrics.get(WINDOW_LAST_EVENT_METRIC)
        live_s = None
        if promoted and last_ms:
            live_s = promoted[0].event_time.timestamp() - last_ms / 1000.0
        lift_lower = metrics.get("eval_pass_lift_lower")
        base = metrics.get("eval_production_pass_at_1")
        rows.append(
            AgentVersionResult(
                version=version,
                parent_version=state.parent_version,
                eval_pass_at_1=metrics.get("eval_pass_at_1"),
                eval_pass_lower=None if lift_lower is None or base is None else base + lift_lower,
                online_reward=reward,
                trials=trials,
                train_tokens=int(metrics.get("train_tokens", 0)),
                stale_rows=int(metrics.get("stale_rows", 0)),
                data_to_live_s=live_s,
                decision=state.status.name,
                reason=state.latest.reason,
                decided_at_s=(
                    state.updated_at.timestamp() - started if state.status in DECIDED else None
                ),
                train_rows=int(metrics.get("train_rows", 0)),
                served_rows=int(metrics.get("served_rows", 0)),
                served_reward=served_reward,
                served=served_count,
                level_pass_at_1={
                    key.removeprefix(LEVEL_METRIC): value
                    for key, value in sorted(metrics.items())
                    if key.startswith(LEVEL_METRIC)
                },
                extra_pass_at_1=metrics.get("eval_extra_pass_at_1"),
            )
        )
    return rows
