"""The HTTP ingestion gateway (`flywheel gateway serve`): events over HTTP into the SDK.

`create_app` builds the Starlette app; `ApiKeyStore` keeps its hashed API keys; `parsing` turns
request bodies into typed events. See docs/gateway.md.
"""

from streams.gateway.app import EventSender, create_app
from streams.gateway.keys import ApiKeyStore, KeyRecord, default_key_path

__all__ = ["ApiKeyStore", "EventSender", "KeyRecord", "create_app", "default_key_path"]
