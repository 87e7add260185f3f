"""A lease on one key of an S3 store: mutual exclusion between processes on any machines.

An object store has no `flock`. It has conditional writes (AWS S3 since 2024, MinIO, S3Proxy 3+):
a PUT with `If-None-Match: *` creates an object only if there is none, and one with
`If-Match: <ETag>` replaces it only if nobody replaced it meanwhile. A lease is such an object,
holding its owner and an expiry time:

- **acquire:** create it (`If-None-Match: *`). If it exists and has expired (its holder died or
  stalled past its time), take it over by replacing exactly the version read (`If-Match`): of two
  processes that both saw it expired, one wins.
- **hold:** a thread renews it (`If-Match` its own ETag) every third of its time to live. A
  renewal that fails means another process took it over: `check()` then raises, and the holder
  stops before its next write.
- **release:** delete it, if it is still the holder's.

What a lease cannot do is fence: a holder stalled for longer than the time to live (a paused VM)
may still be writing when it wakes up, after another took over. The time to live (5 minutes) is
far above a renewal's interval, and the holders check the lease before each file they replace.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from typing import Any

from ground.errors import StorageError
from ground.store import Store

DEFAULT_TTL_S = 300.0
_POLL_S = 0.5


class LeaseError(StorageError):
    """The lease is held by another process (past the wait), or was lost while held."""


class StoreLease:
    """The lease `key` of `store` (an S3 store); see the module docstring."""

    def __init__(self, store: Store, key: str, *, ttl_s: float = DEFAULT_TTL_S) -> None:
        if store.is_local:
            raise StorageError(f"{store} is on local disk: lock it with flock, not a lease")
        self.store, self.key, self.ttl_s = store, key, ttl_s
        self.owner = f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:8]}"
        self._etag: str | None = None
        self._lost: str | None = None
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        bucket, _, prefix = store.root.partition("/")
        self._bucket, self._object = bucket, f"{prefix}/{key}" if prefix else key

    def acquire(self, wait_s: float) -> None:
        """Hold the lease, waiting up to `wait_s` for another holder; LeaseError after that."""
        deadline = time.monotonic() + wait_s
        while True:
            etag = self._put(if_none_match=True)
            if etag is None:
                current = self._read()
                if current is not None and current[0]["expires_at"] < time.time():
                    etag = self._put(if_match=current[1])  # taken over: the holder is gone
            if etag is not None:
                self._etag = etag
                self._renewer = threading.Thread(target=self._renew, daemon=True, name="lease")
                self._renewer.start()
                return
            if time.monotonic() >= deadline:
                holder = current[0]["owner"] if current else "another process"
                raise LeaseError(
                    f"{self.store}/{self.key} is held by {holder} (waited {wait_s:.0f}s); "
                    "another compaction or erasure runs: retry when it is done"
                )
            time.sleep(_POLL_S)

    def check(self) -> None:
        """LeaseError when the lease was lost while held (before a write that needs it)."""
        if self._lost is not None:
            raise LeaseError(f"{self.store}/{self.key}: {self._lost}; stopped before writing")

    def release(self) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
        current = self._read()
        if current is not None and current[1] == self._etag:
            self.store.s3_client().delete_object(Bucket=self._bucket, Key=self._object)
        self._etag = None

    def _renew(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            etag = self._put(if_match=self._etag)
            if etag is None:
                self._lost = "the lease was taken over by another process (this one stalled)"
                return
            self._etag = etag

    def _put(self, *, if_none_match: bool = False, if_match: str | None = None) -> str | None:
        """The new ETag, or None when the condition failed."""
        from botocore.exceptions import ClientError

        body = json.dumps({"owner": self.owner, "expires_at": time.time() + self.ttl_s})
        condition: dict[str, str] = {"IfNoneMatch": "*"} if if_none_match else {}
        if if_match is not None:
            condition["IfMatch"] = if_match
        try:
            response = self.store.s3_client().put_object(
                Bucket=self._bucket, Key=self._object, Body=body.encode(), **condition
            )
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code")
            if code in ("PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey"):
                return None
            raise
        return str(response["ETag"])

    def _read(self) -> tuple[dict[str, Any], str] | None:
        """(the lease's record, its ETag), None when there is none."""
        from botocore.exceptions import ClientError

        try:
            response = self.store.s3_client().get_object(Bucket=self._bucket, Key=self._object)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise
        return json.loads(response["Body"].read()), str(response["ETag"])
