"""The local object store: S3Proxy serving the S3 API over a directory (`filesystem-nio2`).

Requests are signed (AWS SigV2 or SigV4) with one identity and a random secret generated once into
`<stack>/s3/credentials` (mode 0600); the secret reaches S3Proxy through its properties file
(also 0600), never its command line, which any local user can read. A bucket of this backend is a
directory under `<stack>/s3/data`, so the default bucket is created before the server starts.
The backend reads a bucket's or an object's ACL from its file mode (readable by others: public-read,
answered without a signature), so the server runs with umask 077 and the bucket is made 0700.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import httpx

from ground.storage import (
    ACCESS_KEY_VARIABLE,
    SECRET_VARIABLE,
    S3Credentials,
    StorageLocation,
    read_credentials_file,
)
from streams.stack.ports import StackPorts
from streams.stack.processes import ServiceProcess

DEFAULT_BUCKET = "flywheel"
IDENTITY = "flywheel"
REGION = "us-east-1"  # S3Proxy's; clients sign SigV4 requests for it


def s3_endpoint(ports: StackPorts) -> str:
    return f"http://127.0.0.1:{ports.s3}"


def write_private(path: Path, text: str) -> None:
    """Replace `path` with `text`, readable by its owner only from the first byte on."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def s3proxy_properties(data_dir: Path, ports: StackPorts, credentials: S3Credentials) -> str:
    """S3Proxy's configuration: signed requests only, objects under `data_dir`, loopback only."""
    return "\n".join([
        f"s3proxy.endpoint={s3_endpoint(ports)}",
        "s3proxy.authorization=aws-v2-or-v4",
        f"s3proxy.identity={credentials.access_key_id}",
        f"s3proxy.credential={credentials.secret_access_key}",
        "jclouds.provider=filesystem-nio2",
        # The backend's own login; nio2 requires one and checks nothing.
        "jclouds.identity=local",
        "jclouds.credential=local",
        f"jclouds.filesystem.basedir={data_dir}",
        "",
    ])  # fmt: skip


class ObjectStoreService:
    """Starts S3Proxy under `<stack>/s3` and checks that it answers HTTP."""

    def __init__(self, stack_dir: Path, ports: StackPorts, bucket: str = DEFAULT_BUCKET) -> None:
        self.dir = stack_dir / "s3"
        self.data_dir = self.dir / "data"
        self.credentials_file = self.dir / "credentials"
        self.config_file = self.dir / "s3proxy.conf"
        self.ports = ports
        self.bucket = bucket
        self.process = ServiceProcess("s3", stack_dir)

    @property
    def endpoint(self) -> str:
        return s3_endpoint(self.ports)

    def credentials(self) -> S3Credentials:
        """The store's key pair, generated (random secret) the first time it is asked for."""
        if not self.credentials_file.exists():
            fresh = S3Credentials(IDENTITY, secrets.token_urlsafe(30))
            write_private(
                self.credentials_file,
                "# The local object store's key pair; `flywheel stack s3-env` prints it as "
                "exports.\n"
                f"{ACCESS_KEY_VARIABLE}={fresh.access_key_id}\n"
                f"{SECRET_VARIABLE}={fresh.secret_access_key}\n",
            )
        return read_credentials_file(self.credentials_file)

    def client_environment(self) -> dict[str, str]:
        """The variables that point a shell's tools at this store, the secret included."""
        bucket = StorageLocation("s3", self.bucket, self.endpoint, REGION, self.credentials())
        return bucket.environment()

    def start(self, java: str, jar: Path) -> None:
        bucket = self.data_dir / self.bucket
        bucket.mkdir(parents=True, exist_ok=True, mode=0o700)
        for private in (self.data_dir, bucket):
            private.chmod(0o700)  # never public-read (see the module's docstring)
        props = s3proxy_properties(self.data_dir, self.ports, self.credentials())
        write_private(self.config_file, props)
        argv = [
            java,
            self.process.marker,
            "-Xms32m",
            "-Xmx256m",
            # As for the registry: a small service on a small machine starts faster this way.
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-cp",
            str(jar),
            "org.gaul.s3proxy.Main",
            "--properties",
            str(self.config_file),
        ]
        self.process.start(argv, env={}, cwd=self.dir, umask=0o077)

    def answers(self) -> bool:
        """True once the server answers HTTP (an unsigned request is refused, which is enough)."""
        try:
            return httpx.get(f"{self.endpoint}/", timeout=2.0).status_code < 500
        except httpx.HTTPError:
            return False
