"""Where data lives, as one URI: a local directory or a prefix in an S3-compatible store.

`StorageLocation.parse` reads `file:///abs/path`, a plain path or `s3://bucket/prefix`; for S3
the endpoint, region and key pair come from the environment:

    FLYWHEEL_S3_ENDPOINT or AWS_ENDPOINT_URL   e.g. http://127.0.0.1:9000 (unset: AWS itself)
    AWS_REGION or AWS_DEFAULT_REGION           default us-east-1
    AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY   or FLYWHEEL_S3_CREDENTIALS_FILE, a file of
                                               `NAME=value` lines with those two names (the
                                               local stack writes one); unset: the AWS SDK's
                                               default chain (instance profile, ~/.aws)

A location prints as its URI and reprs with the secret masked. `filesystem()` gives the pyarrow
filesystem; pyarrow paths are `location.path` (`bucket/prefix` for S3).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

from ground.errors import StorageError

if TYPE_CHECKING:
    from pyarrow.fs import FileSystem

MASK = "****"
DEFAULT_REGION = "us-east-1"
ACCESS_KEY_VARIABLE = "AWS_ACCESS_KEY_ID"
SECRET_VARIABLE = "AWS_SECRET_ACCESS_KEY"  # noqa: S105 (the variable's name, not a secret)
ENDPOINT_VARIABLES = ("FLYWHEEL_S3_ENDPOINT", "AWS_ENDPOINT_URL")
CREDENTIALS_FILE_VARIABLE = "FLYWHEEL_S3_CREDENTIALS_FILE"
CHECKSUM_VARIABLES = ("AWS_REQUEST_CHECKSUM_CALCULATION", "AWS_RESPONSE_CHECKSUM_VALIDATION")
# S3 bucket naming rules: 3-63 lowercase letters, digits, dots and hyphens, alphanumeric ends.
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_FORMS = "use file:///absolute/path, a plain path, or s3://bucket/prefix"


@dataclass(frozen=True)
class S3Credentials:
    """An access key pair; the secret never appears in repr."""

    access_key_id: str
    secret_access_key: str = field(repr=False)


def read_credentials_file(path: Path) -> S3Credentials:
    """The key pair in a file of `NAME=value` lines (`AWS_ACCESS_KEY_ID`,
    `AWS_SECRET_ACCESS_KEY`; `#` comments allowed). StorageError when unreadable or incomplete."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise StorageError(
            f"cannot read the S3 credentials file {path} ({exc.strerror}): fix "
            f"{CREDENTIALS_FILE_VARIABLE} or the file's permissions"
        ) from None
    values = {}
    for line in text.splitlines():
        name, sep, value = (part.strip() for part in line.partition("="))
        if sep and not name.startswith("#"):
            values[name.removeprefix("export ").strip()] = value
    missing = [n for n in (ACCESS_KEY_VARIABLE, SECRET_VARIABLE) if not values.get(n)]
    if missing:
        raise StorageError(f"{path} has no {' or '.join(missing)}=... line: add it")
    return S3Credentials(values[ACCESS_KEY_VARIABLE], values[SECRET_VARIABLE])


def _credentials(env: Mapping[str, str]) -> S3Credentials | None:
    key, secret = env.get(ACCESS_KEY_VARIABLE), env.get(SECRET_VARIABLE)
    if key and secret:
        return S3Credentials(key, secret)
    if key or secret:
        raise StorageError(
            f"only one of {ACCESS_KEY_VARIABLE} and {SECRET_VARIABLE} is set: set both, or "
            f"neither (then {CREDENTIALS_FILE_VARIABLE} or the AWS SDK's default chain is used)"
        )
    credentials_file = env.get(CREDENTIALS_FILE_VARIABLE)
    return read_credentials_file(Path(credentials_file)) if credentials_file else None


def _endpoint(env: Mapping[str, str]) -> str | None:
    for variable in ENDPOINT_VARIABLES:
        endpoint = env.get(variable)
        if not endpoint:
            continue
        parts = urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.path.strip("/"):
            raise StorageError(
                f"{variable}={endpoint!r} is not an S3 endpoint: set it to http(s)://host[:port]"
                ", e.g. http://127.0.0.1:9000"
            )
        return endpoint.rstrip("/")
    return None


def _s3_path(uri: str) -> str:
    parts = urlsplit(uri)
    if parts.query or parts.fragment:
        raise StorageError(f"{uri!r}: an s3:// URI has no query or fragment; {_FORMS}")
    bucket = parts.netloc  # a user or a port fails the name check below
    if not _BUCKET.fullmatch(bucket) or ".." in bucket:
        raise StorageError(
            f"{uri!r}: {bucket!r} is not a valid bucket name (3-63 lowercase letters, digits, "
            f"dots or hyphens); {_FORMS}"
        )
    segments = [s for s in parts.path.split("/") if s]
    if any(s in (".", "..") for s in segments) or "//" in parts.path.strip("/"):
        raise StorageError(f"{uri!r}: the prefix has empty, '.' or '..' parts; {_FORMS}")
    return "/".join([bucket, *segments])


def _local_path(uri: str) -> str:
    if not uri.startswith("file:"):
        return str(Path(uri).expanduser().absolute())
    parts = urlsplit(uri)
    if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
        raise StorageError(f"{uri!r} is not a local absolute file URI; {_FORMS}")
    return str(Path(parts.path))


@dataclass(frozen=True)
class StorageLocation:
    """A directory (`scheme="file"`, `path` absolute) or an S3 prefix (`path` = bucket/prefix)."""

    scheme: Literal["file", "s3"]
    path: str
    endpoint: str | None = None
    region: str = DEFAULT_REGION
    credentials: S3Credentials | None = field(default=None, repr=False)

    @classmethod
    def parse(cls, uri: str, env: Mapping[str, str] | None = None) -> StorageLocation:
        """Parse `uri`; S3 settings from `env` (default `os.environ`). StorageError names the
        fix for an empty or malformed URI, an unknown scheme or inconsistent S3 settings."""
        env = os.environ if env is None else env
        uri = uri.strip()
        if not uri:
            raise StorageError(f"the storage location is empty; {_FORMS}")
        scheme = urlsplit(uri).scheme.lower()
        if scheme == "s3":
            region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or DEFAULT_REGION
            return cls("s3", _s3_path(uri), _endpoint(env), region, _credentials(env))
        if scheme in ("", "file"):
            return cls("file", _local_path(uri))
        raise StorageError(f"{uri!r}: the scheme {scheme!r} is not supported; {_FORMS}")

    @property
    def uri(self) -> str:
        return f"s3://{self.path}" if self.scheme == "s3" else Path(self.path).as_uri()

    @property
    def bucket(self) -> str | None:
        return self.path.split("/", 1)[0] if self.scheme == "s3" else None

    def child(self, *names: str) -> StorageLocation:
        """The location `names` below this one (same endpoint and credentials)."""
        bad = [n for n in names if not n or n in (".", "..") or "/" in n]
        if bad:
            raise StorageError(f"{bad[0]!r} is not a single name below {self.uri}")
        return StorageLocation(
            self.scheme, "/".join([self.path.rstrip("/"), *names]), self.endpoint, self.region,
            self.credentials,
        )  # fmt: skip

    def environment(self) -> dict[str, str]:
        """The variables that point other S3 clients at this location's store, the secret
        included: the AWS CLI, boto3 and pyarrow (`AWS_ENDPOINT_URL`), mosaicml-streaming
        (`S3_ENDPOINT_URL`), Flywheel (`FLYWHEEL_S3_ENDPOINT`), and the checksum settings that
        S3-compatible servers such as S3Proxy need (see `filesystem`). {} for a local one."""
        if self.scheme == "file":
            return {}
        env = {"AWS_REGION": self.region, **dict.fromkeys(CHECKSUM_VARIABLES, "WHEN_REQUIRED")}
        if self.credentials is not None:
            env[ACCESS_KEY_VARIABLE] = self.credentials.access_key_id
            env[SECRET_VARIABLE] = self.credentials.secret_access_key
        if self.endpoint is not None:
            for variable in (*ENDPOINT_VARIABLES, "S3_ENDPOINT_URL"):
                env[variable] = self.endpoint
        return env

    def filesystem(self) -> FileSystem:
        """The pyarrow filesystem holding `path`: local, or S3 at the endpoint (buckets are
        created on first write). For S3 it sets AWS_REQUEST_CHECKSUM_CALCULATION and
        AWS_RESPONSE_CHECKSUM_VALIDATION to WHEN_REQUIRED in this process unless already set:
        with the SDK's defaults, S3-compatible servers such as S3Proxy refuse uploads
        (XAmzContentSHA256Mismatch) and downloads (501, the x-amz-checksum-mode header)."""
        from pyarrow import fs

        if self.scheme == "file":
            return fs.LocalFileSystem()
        for variable in CHECKSUM_VARIABLES:
            os.environ.setdefault(variable, "WHEN_REQUIRED")
        # background_writes: a failed part then fails close() before CompleteMultipartUpload,
        # so no partial object becomes visible (with synchronous writes, closing after a failed
        # write would complete the upload with the parts sent so far).
        options: dict[str, object] = {
            "region": self.region, "allow_bucket_creation": True, "background_writes": True,
        }  # fmt: skip
        if self.endpoint is not None:
            parts = urlsplit(self.endpoint)
            options.update(endpoint_override=parts.netloc, scheme=parts.scheme)
        if self.credentials is not None:
            options.update(
                access_key=self.credentials.access_key_id,
                secret_key=self.credentials.secret_access_key,
            )
        return fs.S3FileSystem(**options)

    def __str__(self) -> str:
        return self.uri

    def __repr__(self) -> str:
        if self.scheme == "file":
            return f"StorageLocation({self.uri!r})"
        key = self.credentials.access_key_id if self.credentials else None
        secret = MASK if self.credentials else None
        return (
            f"StorageLocation({self.uri!r}, endpoint={self.endpoint!r}, region={self.region!r}, "
            f"access_key_id={key!r}, secret_access_key={secret!r})"
        )
