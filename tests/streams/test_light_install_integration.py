"""The light install for real: a fresh virtualenv gets the base distribution alone (no torch,
transformers or faust) and its SDK sends events to the test broker, read back from here."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import uuid
from pathlib import Path

import httpx
import pytest

from flywheel.listen import free_port
from flywheel.platform_extra import INSTALL_HINT
from flywheel.settings import Settings
from streams.client import ROUTES
from streams.gateway.keys import ApiKeyStore, default_key_path
from tests.readback import end_offsets, read_events

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
# Import names of what the `platform` extra brings and a light install must not have.
HEAVY = ("torch", "torchvision", "transformers", "tokenizers", "faust", "aiokafka", "streaming",
         "matplotlib", "pyarrow", "duckdb", "numpy")  # fmt: skip

# Runs in the light virtualenv: what an IDE plug-in does (docs/sdk.md), with a secret in the
# code text so detect-secrets' redaction runs too. Prints the ids sent and any heavy module seen.
SCRIPT = """
import json, sys
from flywheel.clients import telemetry_client
from flywheel.platform_extra import INSTALL_HINT
from flywheel.settings import Settings
from schemas.enums import Decision, SuggestionTrigger
from schemas.events import EditObserved, SuggestionOffered

session = sys.argv[1]
offer = SuggestionOffered(
    producer="light-sdk", suggestion_id=session + "-sg", request_id="r-1", session_id=session,
    user_id="user-1", repo_id="repo-1", language="python", ide="vscode",
    trigger=SuggestionTrigger.AUTOMATIC, model_name="gate", model_version=0,
    decision=Decision.SHOWN, propensity=0.9, context=(0.5,), context_spec="ctx@1",
    suggestion_chars=40, suggestion_lines=2, latency_ms=80, privacy_mode=False,
    suggestion_text='aws_access_key_id = "AKIA' + 'Q' * 16 + '"\\nprint(1)\\n',
)
edit = EditObserved(producer="light-sdk", session_id=session, chars_inserted=3, chars_deleted=1)
with telemetry_client(Settings.from_env(), name="light") as client:
    client.send(offer)
    client.send(edit)
    unacked = client.flush(30)
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[2].split(",")))
print(json.dumps({"ids": [offer.event_id, edit.event_id], "unacked": unacked, "heavy": heavy}))
"""


def _uv() -> Path:
    """The uv `make install` puts next to this interpreter, else one on PATH."""
    beside = Path(sys.executable).with_name("uv")
    found = beside if beside.exists() else shutil.which("uv")
    if found is None:
        pytest.skip("no uv next to this Python or on PATH (make install provides it)")
    return Path(found)


def _source_copy(dest: Path) -> Path:
    """The files a wheel is built from, copied so that the build writes nothing into the
    repository (setuptools leaves build/ and *.egg-info next to the sources)."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for name in ("pyproject.toml", pyproject["project"]["readme"]):
        shutil.copy2(ROOT / name, dest / name)
    for package in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]:
        name = package.rstrip("*")
        shutil.copytree(ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def _run(args: list[str | Path], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    # No PYTHONPATH: the light virtualenv must find the packages it installed, not the checkout.
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | env
    return subprocess.run(
        [str(a) for a in args], cwd=cwd, env=clean, capture_output=True, text=True,
        timeout=240, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def light_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with `pip install flywheel-platform` (no extras) in it."""
    root = tmp_path_factory.mktemp("light")
    src = root / "src"
    src.mkdir()
    _source_copy(src)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", root / "venv"], check=True)
    python = root / "venv" / "bin" / "python"
    started = time.monotonic()
    installed = _run([_uv(), "pip", "install", "--python", python, src], cwd=root)
    assert installed.returncode == 0, installed.stderr
    print(f"light install: {time.monotonic() - started:.1f}s")  # shown with -s / on failure
    return python


def test_the_light_install_has_no_platform_packages(light_python: Path) -> None:
    for module in HEAVY:
        result = _run([light_python, "-c", f"import {module}"], cwd=light_python.parent)
        assert result.returncode != 0, f"{module} is importable in the light install"
        assert "ModuleNotFoundError" in result.stderr
    # and its CLI names the fix for a platform command instead of a traceback
    learn = _run([light_python.with_name("flywheel"), "learn"], cwd=light_python.parent)
    assert learn.returncode == 1
    assert INSTALL_HINT in learn.stderr and "Traceback" not in learn.stderr


def test_the_light_sdk_sends_events_to_the_broker(
    stack: Settings, light_python: Path, tmp_path: Path
) -> None:
    session = f"light-{uuid.uuid4()}"
    topics = sorted({ROUTES[kind][0] for kind in ROUTES})
    since = end_offsets(stack, topics)
    script = tmp_path / "send.py"
    script.write_text(SCRIPT)
    sent = _run(
        [light_python, script, session, ",".join(HEAVY)], cwd=tmp_path,
        FLYWHEEL_HOME=str(tmp_path / "home"),
    )  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    report = json.loads(sent.stdout.strip().splitlines()[-1])
    assert report["unacked"] == 0
    assert report["heavy"] == []
    found = {str(r.record["event_id"]): r for r in read_events(stack, topics, report["ids"], since)}
    offer_id, edit_id = report["ids"]
    assert found[offer_id].topic == "telemetry.suggestions"
    assert found[offer_id].key == session.encode()
    assert found[offer_id].record["user_id"].startswith("user:")  # pseudonymised at the source
    text = found[offer_id].record["suggestion_text"]
    assert "AKIA" + "Q" * 16 not in text and "print(1)" in text  # redacted, code kept
    assert found[edit_id].topic == "telemetry.edits"
    # a light command in full: the doctor, against the same broker and registry
    doctor = [light_python.with_name("flywheel"), "doctor", "--check", "kafka", "--check", "topics"]
    checked = _run(doctor, cwd=tmp_path, FLYWHEEL_HOME=str(tmp_path / "home"))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_light_install_serves_the_http_gateway(
    stack: Settings, light_python: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    secret = ApiKeyStore(default_key_path(home)).add("light")
    port, session = free_port(), f"light-gw-{uuid.uuid4()}"
    since = end_offsets(stack, ["telemetry.edits"])
    serve = [light_python.with_name("flywheel"), "gateway", "serve", "--port", str(port)]
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {
        "FLYWHEEL_HOME": str(home)
    }
    server = subprocess.Popen(
        [str(a) for a in serve], cwd=tmp_path, env=clean, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    event = {"type": "EditObserved", "event_time": int(time.time() * 1000), "session_id": session,
             "chars_inserted": 3, "chars_deleted": 0}  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while server.poll() is None and time.monotonic() < deadline:
            try:
                response = httpx.post(
                    f"http://127.0.0.1:{port}/v1/events", json=[event],
                    headers={"Authorization": f"Bearer {secret}"}, timeout=10,
                )  # fmt: skip
                break
            except httpx.TransportError:  # not listening yet
                time.sleep(0.2)
        else:
            pytest.fail("the light gateway did not answer within 30 s")
    finally:
        server.send_signal(signal.SIGTERM)
        output, _ = server.communicate(timeout=60)
    assert response.status_code == 200 and response.json()["accepted"] == 1, response.text
    assert server.returncode == 0, output
    event_id = response.json()["results"][0]["event_id"]
    found = read_events(stack, ["telemetry.edits"], [event_id], since)
    assert [r.key for r in found] == [session.encode()]
