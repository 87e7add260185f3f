"""Errors of the feature store; each message says what was wrong and how to fix it."""

from __future__ import annotations

from ground.errors import FlywheelError


class FeatureStoreError(FlywheelError):
    """Base class of the feature store's errors."""


class DeclarationError(FeatureStoreError):
    """A feature declaration (features.yaml) is malformed; the message names the field."""


class UnknownEntityError(FeatureStoreError):
    """An entity type that is not declared (HTTP 404)."""


class UnknownFeatureError(FeatureStoreError):
    """A feature that is not declared, or not declared for the entity type asked (HTTP 404)."""


class AsOfOutOfRangeError(FeatureStoreError):
    """An online lookup at a time older than the online store keeps history for (HTTP 400)."""


class EntityRowsError(FeatureStoreError):
    """Entity rows given to an offline or online lookup lack a key column or a time column."""
