"""Model artifacts: immutable, content-addressed directories ``models/<model>/<version>/``.

An artifact is the files a model was saved as plus ``manifest.json``, which lists every file's
SHA-256 and size. The artifact's SHA-256 is the SHA-256 of the manifest's bytes, and the manifest
is canonical JSON (sorted keys, no model name, version or time in it), so identical files give
the same SHA-256 whatever the model or version: the hash names the content. Serving verifies the
hash before loading (DESIGN §8, §9); artifacts are referenced by absolute ``file://`` URIs, or by
``s3://`` URIs when the models' root is an object store (FLYWHEEL_MODELS).

Publishing on disk writes into a temporary sibling directory, fsyncs every file and the
directory, then renames it into place: a reader sees either no artifact or a complete one, also
after a crash. In an object store (no rename) the manifest is uploaded last: it is the commit,
and a reader trusts nothing without it. Verifying an ``s3://`` artifact downloads it once into a
local cache named by its hash (``$FLYWHEEL_HOME/cache/models/<sha256>``, or
FLYWHEEL_ARTIFACT_CACHE) and checks it there, file by file, as on disk; what is returned is always
a verified local directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from ground.durable import fsync_dir, fsync_file
from ground.errors import StorageError
from ground.store import Store
from model_registry.errors import ArtifactError

MANIFEST = "manifest.json"
MANIFEST_FORMAT = "flywheel-artifact@1"
_CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class ArtifactRef:
    """Where an artifact lives (absolute ``file://`` URI) and the SHA-256 of its manifest."""

    uri: str
    sha256: str

    @property
    def path(self) -> Path:
        return path_of_uri(self.uri)


def artifact_dir(models_root: Path, model_name: str, version: int) -> Path:
    """``<models_root>/<model_name>/<version>``; ArtifactError for a name that is not a plain
    directory name or a version below 1."""
    if not model_name or model_name in (".", "..") or "/" in model_name or "\\" in model_name:
        raise ArtifactError(
            f"model name {model_name!r} cannot name a directory; use letters, digits and dashes"
        )
    if version < 1:
        raise ArtifactError(f"version {version} is not publishable: versions start at 1")
    return Path(models_root).absolute() / model_name / str(version)


def uri_of_path(path: Path) -> str:
    """The absolute ``file://`` URI of ``path``."""
    return Path(path).absolute().as_uri()


def path_of_uri(uri: str) -> Path:
    """The local path a ``file://`` URI names; ArtifactError for any other scheme."""
    parsed = urlparse(uri)
    if parsed.scheme != "file" or parsed.netloc not in ("", "localhost"):
        raise ArtifactError(
            f"artifact URI {uri!r} is not a local file:// URI; artifacts are file:// or s3:// "
            "(publish with model_registry.artifacts.publish_artifact)"
        )
    return Path(unquote(parsed.path))


def build_manifest(directory: Path) -> bytes:
    """Canonical manifest bytes of every regular file under ``directory`` (except a manifest).

    Paths are relative, '/'-separated and sorted. ArtifactError if the directory holds no file
    or holds a symlink (an artifact must be self-contained).
    """
    files: dict[str, dict[str, int | str]] = {}
    for path in sorted(Path(directory).rglob("*")):
        relative = path.relative_to(directory).as_posix()
        if path.is_symlink():
            raise ArtifactError(f"{path} is a symlink; copy the file it points to instead")
        if not path.is_file() or relative == MANIFEST:
            continue
        files[relative] = {"sha256": file_sha256(path), "size": path.stat().st_size}
    if not files:
        raise ArtifactError(f"{directory} holds no files; save the model there first")
    manifest = {"format": MANIFEST_FORMAT, "files": files}
    return (json.dumps(manifest, sort_keys=True, separators=(",", ":")) + "\n").encode()


def file_sha256(path: Path) -> str:
    """Lower-case hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def publish_artifact(
    models_root: Path | Store, model_name: str, version: int, source_dir: Path
) -> ArtifactRef:
    """Copy ``source_dir``'s files into ``models_root/<model_name>/<version>/`` with a manifest
    (``models_root``: a directory, or a store: then the manifest is uploaded last).

    Idempotent: publishing the same content again returns the same reference. Raises
    ArtifactError when the source is empty, holds ``manifest.json`` or a symlink, or when the
    version is already published with different content (versions are immutable: publish a
    new version instead).
    """
    source = Path(source_dir)
    if not source.is_dir():
        raise ArtifactError(f"artifact source {source} is not a directory; save the model first")
    if (source / MANIFEST).exists():
        raise ArtifactError(
            f"{source} already holds {MANIFEST}; pass the model's own files, not an artifact"
        )
    manifest = build_manifest(source)
    sha256 = hashlib.sha256(manifest).hexdigest()
    if isinstance(models_root, Store):
        if models_root.local_dir is None:
            return _publish_to_store(models_root, model_name, version, source, manifest, sha256)
        models_root = models_root.local_dir
    target = artifact_dir(models_root, model_name, version)
    if target.exists():
        return _existing(target, sha256, model_name, version)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f".{version}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        _copy_synced(source, staging, manifest)
        try:
            os.rename(staging, target)
        except OSError:
            if target.exists():  # a concurrent publisher won the race
                return _existing(target, sha256, model_name, version)
            raise
        fsync_dir(target.parent)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return ArtifactRef(uri_of_path(target), sha256)


def verify_artifact(uri: str, sha256: str) -> Path:
    """The artifact's directory, once its manifest hashes to ``sha256`` and every file it
    lists exists with the listed size and hash, and no other file is there. An ``s3://``
    artifact is downloaded into the local cache first (module docstring).

    Raises ArtifactError naming the first problem (missing directory or manifest, hash
    mismatch, a changed, missing or extra file, an unreachable store).
    """
    if uri.startswith("s3://"):
        if not re.fullmatch(r"[0-9a-fA-F]{64}", sha256):  # it names the cache directory
            raise ArtifactError(f"artifact {uri}: {sha256!r} is not a SHA-256 in hex")
        try:
            return _verify_dir(uri, _fetched(uri, sha256), sha256)
        except ArtifactError:  # the cached copy may be what is damaged: fetch it once more
            shutil.rmtree(artifact_cache() / sha256.lower(), ignore_errors=True)
            return _verify_dir(uri, _fetched(uri, sha256), sha256)
    return _verify_dir(uri, path_of_uri(uri), sha256)


def _verify_dir(uri: str, directory: Path, sha256: str) -> Path:
    manifest_path = directory / MANIFEST
    if not manifest_path.is_file():
        raise ArtifactError(
            f"artifact {uri} is missing ({manifest_path} does not exist); was it published "
            "on this machine, or deleted?"
        )
    files = _manifest_files(uri, manifest_path.read_bytes(), sha256)
    for relative, entry in files.items():
        _check_file(uri, directory / relative, relative, entry)
    extra = (
        {
            p.relative_to(directory).as_posix()
            for p in directory.rglob("*")
            if p.is_file() or p.is_symlink()
        }
        - set(files)
        - {MANIFEST}
    )
    if extra:
        raise ArtifactError(
            f"artifact {uri} holds files its manifest does not list: {sorted(extra)[:3]}; "
            "artifacts are immutable, republish as a new version"
        )
    return directory


def _publish_to_store(
    store: Store, model_name: str, version: int, source: Path, manifest: bytes, sha256: str
) -> ArtifactRef:
    artifact_dir(Path("/"), model_name, version)  # the same names and versions as on disk
    prefix = f"{model_name}/{version}"
    uri = store.location.child(model_name, str(version)).uri
    try:
        existing: bytes | None = store.read_bytes(f"{prefix}/{MANIFEST}")
    except FileNotFoundError:
        existing = None
    if existing is not None:
        if hashlib.sha256(existing).hexdigest() == sha256:
            return ArtifactRef(uri, sha256)
        raise _already_published(model_name, version, uri)
    # The manifest's files, each read once: the bytes uploaded are the bytes it lists.
    changed = ArtifactError(f"{source} changed while it was being published; publish it again")
    files = _manifest_files(uri, manifest, sha256)
    for relative, entry in files.items():
        data = (source / relative).read_bytes()
        if len(data) != entry["size"] or hashlib.sha256(data).hexdigest() != entry["sha256"]:
            raise changed
        store.write_bytes(f"{prefix}/{relative}", data)
    if {p.relative_to(source).as_posix() for p in source.rglob("*") if p.is_file()} != set(files):
        raise changed  # a file came or went
    store.write_bytes(f"{prefix}/{MANIFEST}", manifest)  # last: the artifact exists from here
    return ArtifactRef(uri, sha256)


def _already_published(model_name: str, version: int, where: object) -> ArtifactError:
    return ArtifactError(
        f"{model_name} version {version} is already published at {where} with other content; "
        "versions are immutable: publish under the next version (ModelRegistry.next_version)"
    )


def artifact_cache() -> Path:
    """Where ``s3://`` artifacts are verified locally: FLYWHEEL_ARTIFACT_CACHE, else
    ``$FLYWHEEL_HOME/cache/models``."""
    configured = os.environ.get("FLYWHEEL_ARTIFACT_CACHE")
    if configured:
        return Path(configured).expanduser().absolute()
    home = os.environ.get("FLYWHEEL_HOME") or ".flywheel"
    return Path(home).expanduser().absolute() / "cache" / "models"


def _fetched(uri: str, sha256: str) -> Path:
    """The local copy of the ``s3://`` artifact whose manifest hashes to ``sha256``, downloaded
    once (a temporary directory renamed into place); the caller verifies it."""
    target = artifact_cache() / sha256.lower()
    if (target / MANIFEST).is_file():
        return target
    try:
        store = Store.at(uri)
        manifest = store.read_bytes(MANIFEST)
    except FileNotFoundError:
        raise ArtifactError(
            f"artifact {uri} is missing (no {MANIFEST}); was it published?"
        ) from None
    except (OSError, StorageError) as exc:
        raise ArtifactError(
            f"artifact {uri}: cannot read it from the store ({exc}); check the S3 endpoint and "
            "keys in the environment (docs/object-storage.md)"
        ) from exc
    files = _manifest_files(uri, manifest, sha256)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f".{target.name}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        for relative in files:
            destination = staging / relative
            destination.parent.mkdir(parents=True, exist_ok=True)
            destination.write_bytes(store.read_bytes(relative))
        (staging / MANIFEST).write_bytes(manifest)
        try:
            os.rename(staging, target)
        except OSError:
            if not (target / MANIFEST).is_file():  # else: another process fetched it first
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _manifest_files(uri: str, manifest: bytes, sha256: str) -> dict[str, dict[str, object]]:
    """The manifest's files (relative path → size and hash), once the manifest hashes to
    `sha256`; ArtifactError otherwise, or for an unreadable manifest."""
    actual = hashlib.sha256(manifest).hexdigest()
    if actual != sha256.lower():
        raise ArtifactError(
            f"artifact {uri}: manifest hash {actual[:12]}… does not match the registered "
            f"{sha256[:12]}…; the artifact was changed after it was published, republish it "
            "as a new version"
        )
    try:
        files: dict[str, dict[str, object]] = json.loads(manifest)["files"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ArtifactError(f"artifact {uri}: unreadable manifest ({exc!r})") from None
    return files


def _check_file(uri: str, path: Path, relative: str, entry: dict[str, object]) -> None:
    if not path.is_file() or path.is_symlink():
        raise ArtifactError(
            f"artifact {uri}: file {relative} is missing; republish the model as a new version"
        )
    if path.stat().st_size != entry.get("size") or file_sha256(path) != entry.get("sha256"):
        raise ArtifactError(
            f"artifact {uri}: file {relative} does not match its manifest (tampered with or "
            "truncated); republish the model as a new version"
        )


def _existing(target: Path, sha256: str, model_name: str, version: int) -> ArtifactRef:
    uri = uri_of_path(target)
    manifest = target / MANIFEST
    if manifest.is_file() and hashlib.sha256(manifest.read_bytes()).hexdigest() == sha256:
        verify_artifact(uri, sha256)
        return ArtifactRef(uri, sha256)
    raise _already_published(model_name, version, target)


def _copy_synced(source: Path, staging: Path, manifest: bytes) -> None:
    staging.mkdir()
    for path in sorted(source.rglob("*")):
        destination = staging / path.relative_to(source)
        if path.is_dir():
            destination.mkdir(exist_ok=True)
            continue
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, destination)
        fsync_file(destination)
    if build_manifest(staging) != manifest:
        raise ArtifactError(f"{source} changed while it was being published; publish it again")
    with open(staging / MANIFEST, "wb") as f:
        f.write(manifest)
        f.flush()
        os.fsync(f.fileno())
    for directory in sorted({p.parent for p in staging.rglob("*")}, reverse=True):
        fsync_dir(directory)
