"""A tree of files under one storage location, on local disk or in an S3-compatible store.

Keys are `/`-separated paths relative to the location (`rewards/dt=2026-12-06/hour=14/x.parquet`).
The one guarantee every writer here builds on is **atomic visibility**: after `write_atomically`
a reader sees the whole new file or no file, also when the writer is killed mid-write.

- **Local disk:** `ground.durable.write_file_durably` (a temporary file beside the final one,
  `.<name>.<token>.tmp`, which no `*.parquet` glob matches; fsync, rename, fsync of the
  directory).
- **S3:** object stores have no rename, but a PUT is atomic: the object appears whole when the
  upload completes, never before (a multipart upload too: parts are invisible until
  CompleteMultipartUpload, which Arrow sends only when every part succeeded). A writer killed
  mid-upload leaves an incomplete multipart upload, invisible to readers; a bucket lifecycle
  rule (AbortIncompleteMultipartUpload) reclaims its space. Listings are read-after-write
  consistent on AWS S3 (since 2020), MinIO, Ceph RGW and S3Proxy, which the resume rule of the
  lake (`contracts.lake_layout`) needs: a file written is a file listed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from ground.durable import fsync_dir, write_file_durably
from ground.errors import StorageError
from ground.storage import StorageLocation

if TYPE_CHECKING:
    from pyarrow.fs import FileSystem


@dataclass(frozen=True)
class StoredFile:
    """One file in a store: its key, its size in bytes and when it was last written (ns since
    the epoch; None where the store does not say)."""

    key: str
    size: int
    mtime_ns: int | None = None

    @property
    def name(self) -> str:
        return self.key.rsplit("/", 1)[-1]


class Store:
    """The files below `location` (see the module docstring)."""

    def __init__(self, location: StorageLocation) -> None:
        self.location = location
        self.fs: FileSystem = location.filesystem()
        self.root = location.path.rstrip("/") or "/"
        self._s3: Any = None

    @classmethod
    def at(cls, where: str | Path | StorageLocation | Store) -> Store:
        """The store at a URI, a local path or a parsed location (a store: itself);
        StorageError names the fix."""
        if isinstance(where, Store):
            return where
        if isinstance(where, StorageLocation):
            return cls(where)
        return cls(StorageLocation.parse(str(where)))

    @property
    def is_local(self) -> bool:
        return self.location.scheme == "file"

    @property
    def local_dir(self) -> Path | None:
        """The directory of a local store, None for an object store."""
        return Path(self.root) if self.is_local else None

    def path(self, key: str) -> str:
        """The filesystem path of `key` (what pyarrow's `filesystem=self.fs` readers take)."""
        return f"{self.root}/{key}" if key else self.root

    def key(self, path: str) -> str:
        """The key of a filesystem path below the root (inverse of `path`)."""
        prefix = self.root.rstrip("/") + "/"
        if not path.startswith(prefix):
            raise StorageError(f"{path} is not below {self.location}")
        return path[len(prefix) :]

    def files(self, prefix: str = "") -> list[StoredFile]:
        """Every file below `prefix` (recursively), in no particular order; [] when there is
        none. Directories that vanish during the listing (a local writer removing them) are
        fine. OSError (unreachable store, refused credentials) propagates."""
        from pyarrow import fs

        base = self.path(prefix.strip("/"))
        selector = fs.FileSelector(base, recursive=True, allow_not_found=True)
        try:
            infos = self.fs.get_file_info(selector)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [
            StoredFile(self.key(i.path), i.size or 0, i.mtime_ns)
            for i in infos
            if i.type == fs.FileType.File
        ]

    def write_atomically(self, key: str, write: Callable[[BinaryIO], object]) -> int:
        """Call `write(stream)` to produce the file `key`, visible whole or not at all (module
        docstring); an existing file of that key is replaced. Returns the size in bytes.
        Errors propagate after any temporary file is removed (nothing new is visible)."""
        if self.is_local:
            return write_file_durably(Path(self.path(key)), write)
        import pyarrow as pa

        # Encode in memory first, upload in one go: a writer that fails half-way through
        # encoding must not leave a stream that closing would complete into a partial object.
        buffer = pa.BufferOutputStream()
        write(buffer)  # a NativeFile is a binary stream
        data: pa.Buffer = buffer.getvalue()
        with self.fs.open_output_stream(self.path(key)) as out:
            out.write(data)
        return int(data.size)

    def write_bytes(self, key: str, data: bytes) -> int:
        """`write_atomically` of `data`."""
        return self.write_atomically(key, lambda out: out.write(data))

    def read_bytes(self, key: str) -> bytes:
        """The contents of `key`; FileNotFoundError when there is none."""
        with self.fs.open_input_stream(self.path(key)) as stream:
            return bytes(stream.read())

    def delete(self, key: str) -> bool:
        """Delete `key`; False when it was already gone (another process deleted it)."""
        try:
            self.fs.delete_file(self.path(key))
        except FileNotFoundError:
            return False
        return True

    def sync_dir(self, key_prefix: str) -> None:
        """Make creations and deletions in the directory `key_prefix` durable: fsync on local
        disk; nothing on S3, where every acknowledged request is durable."""
        directory = self.local_dir
        if directory is not None:
            target = directory / key_prefix
            if target.is_dir():
                fsync_dir(target)

    def s3_client(self) -> Any:
        """A boto3 S3 client of this store's endpoint, region and keys (one per store): for the
        conditional writes pyarrow's filesystem does not offer (`ground.lease`)."""
        if self._s3 is None:
            import boto3
            from botocore.config import Config

            loc = self.location
            keys = loc.credentials
            config = Config(
                request_checksum_calculation="when_required",  # as `filesystem` (S3Proxy)
                response_checksum_validation="when_required",
                s3={"addressing_style": "path"} if loc.endpoint else {},
            )
            self._s3 = boto3.client(
                "s3", endpoint_url=loc.endpoint, region_name=loc.region, config=config,
                aws_access_key_id=keys.access_key_id if keys else None,
                aws_secret_access_key=keys.secret_access_key if keys else None,
            )  # fmt: skip
        return self._s3

    def __str__(self) -> str:
        return str(self.location)

    def __repr__(self) -> str:
        return f"Store({self.location!r})"
