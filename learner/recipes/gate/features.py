"""Feature-store features as extra inputs of the suggestion gate (issue 5, docs/learner.md).

One list of declared features (``LearnerConfig.features``, e.g. ``user.accept_rate_24h``) is
computed two ways from the same declarations (docs/features.md):

* **offline**, for training and gating: :func:`point_in_time_enrich` is the ``enrich`` hook of
  ``learner.recipes.gate.windows.build_window`` / ``load_rows``; each reward row gets the
  features' values from the lake at its decision time minus ``lag_ms`` (``historical_features``);
* **online**, for serving: :class:`OnlineFeatureProvider` gives a ``ServingPolicy`` the same
  columns for a ``RequestBatch`` from an ``OnlineFeatureStore`` fed by the feature processor.

Both yield ``feature_matrix``'s layout: k values (undefined → 0) then k ``log1p(count)``,
named by ``matrix_columns(names)``, in the order of the config list.

**Why ``event_time - 1 ms`` offline.** A Reward carries its decision's event time, so features
at ``t`` would count the row's own reward: the label would leak into the input (a user's
accept rate already including this very accept). At ``t - 1 ms`` only earlier decisions count.

**Known skew** (online vs offline at the same decision): online, at decision time, rewards of
the last attribution window (plus pipeline latency) have not been joined yet, so the store's
values lag; offline at ``t - lag_ms`` sees every reward of a decision before ``t - lag_ms``.
``lag_ms`` can be raised to that typical delay to make training see what serving will see; with
24 h windows the difference is a few minutes of a day's rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from feature_store import (
    FeatureSet,
    FeatureStoreError,
    OnlineFeatureStore,
    feature_matrix,
    historical_features,
    load_features,
    matrix_columns,
    online_features,
)
from learner.errors import LearnerError
from policies.policy import RequestBatch

Enrich = Callable[[pa.Table], pa.Table]  # learner.recipes.gate.reward_rows.Enrich
LEAKAGE_GUARD_MS = 1  # features of a decision at t are read at t - 1 ms (module docstring)
# Entity types a RequestBatch can key: its user ids and languages (not repos, whose ids it lacks).
SERVABLE_ENTITIES = ("user", "user_language")


def validate_feature_names(
    names: Sequence[str], feature_set: FeatureSet | None = None
) -> tuple[str, ...]:
    """``names`` as a tuple, checked against the declarations (default: the shipped ones).

    Raises LearnerError naming the unknown or duplicated feature and listing the declared ones,
    or a feature of an entity type serving cannot key (only user and user_language can be).
    """
    fs = feature_set if feature_set is not None else load_features()
    chosen = tuple(str(n) for n in names)
    dupes = sorted({n for n in chosen if chosen.count(n) > 1})
    if dupes:
        raise LearnerError(f"features lists {dupes} more than once; name each feature once.")
    try:
        declarations = fs.resolve(chosen)
    except FeatureStoreError as exc:
        raise LearnerError(f"features: {exc}") from None
    unservable = [d.qualified_name for d in declarations if d.entity.name not in SERVABLE_ENTITIES]
    if unservable:
        raise LearnerError(
            f"features {unservable} are keyed by an entity a serving request does not carry; "
            f"use features of {' or '.join(SERVABLE_ENTITIES)}."
        )
    return chosen


def feature_columns(names: Sequence[str]) -> tuple[str, ...]:
    """The extra columns ``names`` add to the policy input (``matrix_columns``)."""
    return tuple(matrix_columns(list(names)))


def point_in_time_enrich(
    names: Sequence[str],
    lake: Path,
    *,
    lag_ms: int = LEAKAGE_GUARD_MS,
    feature_set: FeatureSet | None = None,
) -> Enrich:
    """An ``enrich`` hook: reward rows (the lake's Reward columns, ``event_time`` the decision
    time) → the same rows plus :func:`feature_columns` (float32), the features' values from
    ``lake`` at ``event_time - lag_ms``. ``lag_ms`` >= 1 keeps a row's own reward out of its
    features (module docstring). Rows without a user id get undefined features (0, count 0).
    """
    if lag_ms < 1:
        raise LearnerError(f"lag_ms={lag_ms} would let a row see its own reward; use >= 1.")
    chosen = tuple(names)
    columns = feature_columns(chosen)
    fs = feature_set if feature_set is not None else load_features()
    keys = sorted({k for d in fs.resolve(chosen) for k in d.entity.keys})

    def enrich(table: pa.Table) -> pa.Table:
        ms = pc.cast(pc.cast(table.column("event_time"), pa.timestamp("ms", tz="UTC")), pa.int64())
        rows = pa.table(
            {
                **{k: table.column(k) for k in keys},
                "event_time": pc.subtract(ms, pa.scalar(lag_ms, pa.int64())),
            }
        )
        looked_up = historical_features(rows, list(chosen), lake, feature_set=fs)
        matrix = feature_matrix(looked_up, list(chosen))
        for j, name in enumerate(columns):
            table = table.append_column(pa.field(name, pa.float32()), pa.array(matrix[:, j]))
        return table

    return enrich


class OnlineFeatureProvider:
    """A ``policies.gate_net.FeatureProvider`` over an online store: the latest values (as of the
    store's watermark, the newest reward event time it has seen) of ``names`` per request.

    ``pseudonymize`` maps a raw user id of the batch to the pseudonym rewards carry (in the
    platform: ``flywheel.clients.pseudonymizer(settings).pseudonym("user", raw)``); without it,
    ids are used as they are. A batch without user ids gets undefined features.
    """

    def __init__(
        self,
        store: OnlineFeatureStore,
        names: Sequence[str],
        pseudonymize: Callable[[str], str] | None = None,
    ) -> None:
        self.names = validate_feature_names(names, store.features)
        self._columns = feature_columns(self.names)
        self._store = store
        self._pseudonymize = pseudonymize or (lambda raw: raw)
        self._cache: dict[str, str] = {}  # raw id → pseudonym (HMAC per request adds up)

    @property
    def columns(self) -> tuple[str, ...]:
        return self._columns

    def __call__(self, batch: RequestBatch) -> np.ndarray:
        """float32 (len(batch), 2k): ``feature_matrix`` of the batch's users (and languages)."""
        n = len(batch)
        if len(batch.user_ids) != n:
            users: list[str | None] = [None] * n
        else:
            users = [self._pseudonym(u) for u in batch.user_ids]
        rows = pa.table(
            {
                "user_id": pa.array(users, pa.string()),
                "language": pa.array(list(batch.languages), pa.string()),
            }
        )
        table = online_features(self._store, rows, list(self.names))
        return feature_matrix(table, list(self.names))

    def _pseudonym(self, raw: str) -> str:
        pseudonym = self._cache.get(raw)
        if pseudonym is None:
            pseudonym = self._cache[raw] = self._pseudonymize(raw)
        return pseudonym
