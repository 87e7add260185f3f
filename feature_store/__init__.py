"""Features declared once, computed online (stream) and offline (DuckDB as-of joins).

Public API (docs/features.md); the Kafka processor (``feature_store.processor``) and the HTTP app
(``feature_store.service``) are imported from their modules, so this import stays light.
"""

from feature_store.declarations import (
    ENTITY_TYPES,
    EntityType,
    FeatureDeclaration,
    FeatureSet,
    load_features,
)
from feature_store.errors import FeatureStoreError
from feature_store.offline import historical_features
from feature_store.online import FeatureValue, OnlineAggregator, OnlineFeatureStore
from feature_store.semantics import entity_id
from feature_store.tables import feature_matrix, matrix_columns, online_features

__all__ = [
    "ENTITY_TYPES",
    "EntityType",
    "FeatureDeclaration",
    "FeatureSet",
    "FeatureStoreError",
    "FeatureValue",
    "OnlineAggregator",
    "OnlineFeatureStore",
    "entity_id",
    "feature_matrix",
    "historical_features",
    "load_features",
    "matrix_columns",
    "online_features",
]
