"""The analyst views: SQL over the topic views, in dependency order (docs/analysts.md).

Definitions the numbers follow (they match the simulator's ground truth and `tab@1`):

- a *request* is one `SuggestionOffered` row; it is *shown* when `decision = 'SHOWN'`;
- it is *accepted* when shown and its outcome is ACCEPTED or PARTIAL (the earliest outcome by
  event time; no outcome means ignored, which counts as rejected);
- an accepted suggestion *survived* when its retained fraction is > 0: the last edit (by event
  time, then elapsed time, then event id) reporting `accepted_chars_retained` over the accepted
  chars; no such edit, or no chars accepted, counts as fully retained (as
  `processors.rewards.functions.retained_fraction`). The views use every edit of the
  suggestion; `survival@1` rewards only count edits inside the attribution window;
- `accept_rate` is accepted / shown, `shown_per_1000` is 1000 * shown / requests; a rate whose
  denominator is 0 is NULL.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AnalystView:
    """One analyst view: its name, a one-line description and the SELECT defining it."""

    name: str
    description: str
    sql: str


_SUGGESTION_FACTS = """
WITH first_outcome AS (
    SELECT suggestion_id,
           arg_min(outcome, struct_pack(t := event_time, id := event_id)) AS outcome,
           arg_min(accepted_chars, struct_pack(t := event_time, id := event_id))
               AS accepted_chars
    FROM telemetry_outcomes
    GROUP BY suggestion_id
),
last_retention AS (
    SELECT suggestion_id,
           arg_max(accepted_chars_retained, struct_pack(
               t := event_time, e := coalesce(elapsed_since_acceptance_ms, 0), id := event_id
           )) AS retained_chars
    FROM telemetry_edits
    WHERE suggestion_id IS NOT NULL AND accepted_chars_retained IS NOT NULL
    GROUP BY suggestion_id
),
joined AS (
    SELECT s.suggestion_id, s.request_id, s.session_id, s.user_id, s.repo_id,
           s.model_name, s.model_version, s.language, s.ide, s.trigger,
           s.dt AS day, s.event_time, s.decision, s.propensity,
           s.decision = 'SHOWN' AS shown,
           o.outcome, o.accepted_chars,
           s.decision = 'SHOWN' AND coalesce(o.outcome IN ('ACCEPTED', 'PARTIAL'), false)
               AS accepted,
           r.retained_chars
    FROM telemetry_suggestions AS s
    LEFT JOIN first_outcome AS o USING (suggestion_id)
    LEFT JOIN last_retention AS r USING (suggestion_id)
)
SELECT *,
       CASE WHEN NOT accepted THEN NULL
            WHEN retained_chars IS NULL OR accepted_chars <= 0 THEN CAST(1 AS DOUBLE)
            ELSE least(1.0, greatest(0.0, retained_chars / accepted_chars))
       END AS retained_fraction,
       accepted AND (retained_chars IS NULL OR accepted_chars <= 0 OR retained_chars > 0)
           AS survived
FROM joined
"""

_ACCEPTANCE_MEASURES = """
    count(*) AS requests,
    count(*) FILTER (WHERE shown) AS shown,
    count(*) FILTER (WHERE accepted) AS accepted,
    1000.0 * count(*) FILTER (WHERE shown) / count(*) AS shown_per_1000,
    count(*) FILTER (WHERE accepted) / nullif(count(*) FILTER (WHERE shown), 0) AS accept_rate,
    1000.0 * count(*) FILTER (WHERE accepted) / count(*) AS accepted_per_1000
"""


def _acceptance(keys: str) -> str:
    return f"SELECT {keys},{_ACCEPTANCE_MEASURES}FROM suggestion_facts GROUP BY ALL ORDER BY ALL"


_SUGGESTION_FUNNEL = """
SELECT model_name, model_version,
       count(*) AS offered,
       count(*) FILTER (WHERE shown) AS shown,
       count(*) FILTER (WHERE accepted) AS accepted,
       count(*) FILTER (WHERE survived) AS survived,
       count(*) FILTER (WHERE shown) / count(*) AS shown_rate,
       count(*) FILTER (WHERE accepted) / nullif(count(*) FILTER (WHERE shown), 0)
           AS accept_rate,
       count(*) FILTER (WHERE survived) / nullif(count(*) FILTER (WHERE accepted), 0)
           AS survival_rate,
       avg(retained_fraction) AS mean_retained_fraction
FROM suggestion_facts
GROUP BY ALL ORDER BY ALL
"""

_REWARD_MEASURES = """
    count(*) AS rewards,
    sum(reward) AS reward_sum,
    avg(reward) AS reward_per_request,
    1000.0 * count(*) FILTER (WHERE decision = 'SHOWN')
        / nullif(count(*) FILTER (WHERE source = 'SUGGESTION'), 0) AS shown_per_1000,
    avg(advantage) AS mean_advantage
"""

_ROLLOUT_MEASURES = """
    count(*) AS rollouts,
    count(DISTINCT group_id) AS groups,
    CAST(sum(tests_passed) AS BIGINT) AS tests_passed,
    CAST(sum(tests_total) AS BIGINT) AS tests_total,
    sum(tests_passed) / nullif(sum(tests_total), 0) AS pass_rate,
    avg(CASE WHEN tests_total > 0 AND tests_passed = tests_total THEN 1.0 ELSE 0.0 END)
        AS solved_rate,
    avg(duration_ms) AS mean_duration_ms
"""

# Tool calls of agent episodes (agent.tool_calls): how often each tool is called and how it goes.
_TOOL_CALLS = """
SELECT model_name, model_version, tool,
    count(*) AS calls,
    count(DISTINCT rollout_id) AS rollouts,
    avg(CASE WHEN status = 'ok' THEN 1.0 ELSE 0.0 END) AS ok_rate,
    avg(CASE WHEN truncated THEN 1.0 ELSE 0.0 END) AS truncated_rate,
    avg(duration_ms) AS mean_duration_ms,
    avg(observation_bytes) AS mean_observation_bytes
FROM agent_tool_calls GROUP BY ALL ORDER BY ALL
"""

ANALYST_VIEWS: tuple[AnalystView, ...] = (
    AnalystView(
        "suggestion_facts",
        "one row per suggestion request: offer, decision, first outcome, retention",
        _SUGGESTION_FACTS,
    ),
    AnalystView(
        "acceptance_by_version",
        "requests, shown per 1,000, accept rate per model version",
        _acceptance("model_name, model_version"),
    ),
    AnalystView(
        "acceptance_by_language",
        "the acceptance measures per model version and language",
        _acceptance("model_name, model_version, language"),
    ),
    AnalystView(
        "acceptance_by_day",
        "the acceptance measures per UTC day (dt) and model version",
        _acceptance("day, model_name, model_version"),
    ),
    AnalystView(
        "suggestion_funnel",
        "offered -> shown -> accepted -> survived per model version",
        _SUGGESTION_FUNNEL,
    ),
    AnalystView(
        "reward_by_version",
        "reward per request per source, reward function and model version",
        "SELECT source, reward_fn, model_name, model_version,"
        f"{_REWARD_MEASURES}FROM rewards GROUP BY ALL ORDER BY ALL",
    ),
    AnalystView(
        "reward_by_fn",
        "reward per request per source and reward function, all versions",
        f"SELECT source, reward_fn,{_REWARD_MEASURES}FROM rewards GROUP BY ALL ORDER BY ALL",
    ),
    AnalystView(
        "rollout_pass_rates",
        "agent rollouts: test pass rate and solved rate per task and model version",
        "SELECT task_id, model_name, model_version,"
        f"{_ROLLOUT_MEASURES}FROM rollouts_results GROUP BY ALL ORDER BY ALL",
    ),
    AnalystView(
        "rollout_pass_rates_by_version",
        "agent rollouts: test pass rate and solved rate per model version, all tasks",
        "SELECT model_name, model_version, count(DISTINCT task_id) AS tasks,"
        f"{_ROLLOUT_MEASURES}FROM rollouts_results GROUP BY ALL ORDER BY ALL",
    ),
    AnalystView(
        "tool_calls_by_version",
        "agent episodes' tool calls: calls, outcome rates, duration per tool and model version",
        _TOOL_CALLS,
    ),
)
