"""The local object store without a JVM: credentials, configuration, command line, status."""

from __future__ import annotations

import os
import socket
import stat
import sys
from pathlib import Path

import pytest

from ground.storage import StorageLocation
from streams.errors import StackError
from streams.stack import artifacts, versions
from streams.stack.local import LocalStack
from streams.stack.ports import StackPorts
from streams.stack.s3 import ObjectStoreService, s3proxy_properties

PORTS = StackPorts(kafka=1, controller=2, registry=3, s3=4567)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_credentials_are_generated_once_and_readable_by_the_owner_only(tmp_path: Path) -> None:
    store = ObjectStoreService(tmp_path, PORTS)
    first = store.credentials()
    assert first == store.credentials()  # kept, not regenerated
    assert _mode(store.credentials_file) == 0o600
    assert len(first.secret_access_key) >= 32
    other = ObjectStoreService(tmp_path / "other", PORTS).credentials()
    assert other.secret_access_key != first.secret_access_key
    assert first.secret_access_key not in repr(first)


def test_s3proxy_signs_requests_and_stores_objects_under_the_stack(tmp_path: Path) -> None:
    store = ObjectStoreService(tmp_path, PORTS)
    text = s3proxy_properties(store.data_dir, PORTS, store.credentials())
    props = dict(line.split("=", 1) for line in text.splitlines())
    assert props["s3proxy.endpoint"] == "http://127.0.0.1:4567"  # loopback only
    assert props["s3proxy.authorization"] == "aws-v2-or-v4"
    assert props["s3proxy.identity"] == store.credentials().access_key_id
    assert props["s3proxy.credential"] == store.credentials().secret_access_key
    assert props["jclouds.provider"] == "filesystem-nio2"
    assert props["jclouds.filesystem.basedir"] == str(tmp_path / "s3" / "data")


def test_start_creates_the_bucket_and_keeps_the_secret_off_the_command_line(
    tmp_path: Path,
) -> None:
    java = tmp_path / "java"  # records its arguments instead of running S3Proxy
    record = "import os, sys; open(sys.argv[-1] + '.argv', 'w').write(f'{os.umask(0)} {sys.argv}')"
    java.write_text(f"#!{sys.executable}\n{record}\n")
    java.chmod(0o755)
    store = ObjectStoreService(tmp_path, PORTS)
    store.start(str(java), tmp_path / "s3proxy.jar")
    pid = store.process.recorded_pid()
    assert pid is not None
    os.waitpid(pid, 0)
    argv = Path(f"{store.config_file}.argv").read_text()
    assert "org.gaul.s3proxy.Main" in argv and str(store.config_file) in argv
    assert store.credentials().secret_access_key not in argv
    assert (store.data_dir / "flywheel").is_dir()  # a bucket of this backend is a directory
    # The backend answers unsigned reads of what others may read: nothing it makes is.
    assert _mode(store.data_dir / "flywheel") == _mode(store.data_dir) == 0o700
    assert argv.startswith(f"{0o077} ")  # the server's umask
    assert _mode(store.config_file) == 0o600


def test_the_client_environment_points_a_storage_location_at_the_store(tmp_path: Path) -> None:
    store = ObjectStoreService(tmp_path, PORTS)
    env = store.client_environment()
    assert env["FLYWHEEL_S3_ENDPOINT"] == env["S3_ENDPOINT_URL"] == "http://127.0.0.1:4567"
    assert env["AWS_REQUEST_CHECKSUM_CALCULATION"] == "WHEN_REQUIRED"
    location = StorageLocation.parse("s3://flywheel/lake", env)
    assert location.endpoint == store.endpoint
    assert location.credentials == store.credentials()


def test_status_shows_the_store_with_its_bucket_and_never_the_secret(tmp_path: Path) -> None:
    stack = LocalStack(tmp_path, PORTS)
    s3 = next(s for s in stack.status() if s.name == "s3")
    assert s3.version == versions.S3PROXY_VERSION
    assert s3.address == "http://127.0.0.1:4567 (bucket flywheel)"
    assert not s3.running
    assert stack.s3.answers() is False  # nothing listens on that port


def test_a_port_in_use_names_the_s3_port_variable(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        with pytest.raises(StackError, match="FLYWHEEL_STACK_S3_PORT"):
            LocalStack(tmp_path, PORTS)._require_free(sock.getsockname()[1])


def test_maven_failure_names_s3proxy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mvn = tmp_path / "mvn"
    mvn.write_text("#!/bin/sh\necho 'Could not resolve org.gaul:s3proxy'\nexit 1\n")
    mvn.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    with pytest.raises(StackError, match=r"Maven could not resolve S3Proxy(.|\n)*org.gaul:s3proxy"):
        artifacts.s3proxy_jar(tmp_path / "artifacts")
    assert not (tmp_path / "artifacts" / f"s3proxy-{versions.S3PROXY_VERSION}").exists()
