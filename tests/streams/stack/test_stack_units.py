"""The local stack's logic without a broker: version checks, ports, processes, error messages."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from streams.errors import StackError
from streams.stack import artifacts
from streams.stack.kafka import format_args, new_cluster_id, server_properties
from streams.stack.local import LocalStack
from streams.stack.ports import StackPorts
from streams.stack.processes import ServiceProcess, log_tail, port_in_use


@pytest.mark.parametrize(
    ("output", "major"),
    [
        ('openjdk version "17.0.15" 2025-04-15', 17),
        ('java version "1.8.0_292"', 8),
        ('openjdk version "21" 2023-09-19', 21),
        ('openjdk version "11.0.2" 2019-01-15 LTS', 11),
    ],
)
def test_java_major_version_is_parsed(output: str, major: int) -> None:
    assert artifacts.parse_java_major(output) == major


def _fake_java(tmp_path: Path, version: str) -> Path:
    java = tmp_path / "bin" / "java"
    java.parent.mkdir()
    java.write_text(f"#!/bin/sh\necho 'openjdk version \"{version}\" 2019-01-15' >&2\n")
    java.chmod(0o755)
    return java


def test_old_java_is_refused_with_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_java(tmp_path, "11.0.2")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(StackError, match=r"Java 11, the local stack needs Java 17\+.*apt-get"):
        artifacts.java_executable()


def test_missing_java_and_maven_name_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(StackError, match="Java was not found: install"):
        artifacts.java_executable()
    with pytest.raises(StackError, match="apt-get install maven"):
        artifacts.maven_executable()


def test_server_properties_are_a_single_kraft_node_on_loopback(tmp_path: Path) -> None:
    props = server_properties(tmp_path, StackPorts(kafka=1111, controller=2222, registry=3333))
    lines = set(props.splitlines())
    assert "process.roles=broker,controller" in lines
    assert "controller.quorum.voters=1@127.0.0.1:2222" in lines
    assert "advertised.listeners=PLAINTEXT://127.0.0.1:1111" in lines
    assert f"log.dirs={tmp_path}" in lines
    assert "auto.create.topics.enable=false" in lines


def test_cluster_ids_are_22_url_safe_characters() -> None:
    ids = {new_cluster_id() for _ in range(50)}
    assert len(ids) == 50
    assert all(len(i) == 22 and "=" not in i and "/" not in i and "+" not in i for i in ids)


def test_a_cluster_id_starting_with_a_dash_stays_the_options_value(tmp_path: Path) -> None:
    args = format_args(tmp_path / "server.properties", "-AbCdEfGhIjKlMnOpQrStUv")
    assert "--cluster-id=-AbCdEfGhIjKlMnOpQrStUv" in args
    assert not [a for a in args if a.startswith("-A")]  # never a bare argument argparse misreads


def test_a_port_in_use_is_detected_and_named_with_the_fix(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert port_in_use(port)
        stack = LocalStack(tmp_path, StackPorts(kafka=port, controller=port + 1, registry=1))
        with pytest.raises(StackError, match=f"port {port} is in use.*FLYWHEEL_STACK_KAFKA_PORT"):
            stack._require_free(port)
    assert not port_in_use(port)


def _sleeper(service: ServiceProcess, seconds: int = 60) -> int:
    # The marker rides along as an argument, as a JVM's -D flag does. (Not `sh -c "sleep"`:
    # the shell may exec sleep in its place, and the marker vanishes from the command line.)
    return service.start(
        [sys.executable, "-c", f"import time; time.sleep({seconds})", service.marker],
        env={},
        cwd=service.home,
    )


def test_stop_ends_the_service_it_started(tmp_path: Path) -> None:
    service = ServiceProcess("svc", tmp_path)
    pid = _sleeper(service)
    assert service.running_pid() == pid
    assert service.stop(timeout_s=5)
    assert service.running_pid() is None
    assert not service.pid_file.exists()


def test_a_reused_pid_is_never_stopped(tmp_path: Path) -> None:
    service = ServiceProcess("svc", tmp_path)
    service.pid_file.parent.mkdir(parents=True)
    service.pid_file.write_text(f"{os.getpid()}\n")  # this test process: not the service
    assert service.running_pid() is None
    assert service.stop() is False


def test_a_service_that_dies_while_starting_shows_its_log(tmp_path: Path) -> None:
    service = ServiceProcess("kafka", tmp_path)
    service.start(["sh", "-c", "echo 'FATAL address already in use'; exit 3"], env={}, cwd=tmp_path)
    with pytest.raises(StackError, match=r"kafka exited while starting(.|\n)*FATAL address"):
        service.wait_until(lambda: False, "never", timeout_s=10)


def test_a_service_that_never_answers_times_out_with_its_log(tmp_path: Path) -> None:
    service = ServiceProcess("registry", tmp_path)
    _sleeper(service, seconds=30)
    try:
        with pytest.raises(StackError, match=r"did not become ready .* within 1s"):
            service.wait_until(lambda: False, "GET /subjects", timeout_s=1)
    finally:
        service.stop(timeout_s=5)


def test_log_tail_keeps_the_last_lines(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    assert log_tail(log, lines=3).splitlines() == ["line 97", "line 98", "line 99"]
    assert "no log" in log_tail(tmp_path / "missing.log")


def test_maven_failure_shows_what_maven_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mvn = tmp_path / "mvn"
    mvn.write_text("#!/bin/sh\necho 'Could not resolve io.apicurio:nope'\nexit 1\n")
    mvn.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    with pytest.raises(StackError, match=r"Maven could not resolve(.|\n)*io.apicurio:nope"):
        artifacts.apicurio_app(tmp_path / "artifacts")
    assert not (tmp_path / "artifacts" / "apicurio-3.0.9").exists()


def test_the_stack_cli_runs_as_a_console_script() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "flywheel", "stack", "--help"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert "up" in result.stdout and "down" in result.stdout
