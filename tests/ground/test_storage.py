"""Storage locations: URIs parsed, S3 settings read from the environment, secrets masked."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from ground.errors import StorageError
from ground.storage import CHECKSUM_VARIABLES, StorageLocation, read_credentials_file

SECRET = "s3cr3t-value-never-printed"
S3_ENV = {
    "FLYWHEEL_S3_ENDPOINT": "http://127.0.0.1:9000",
    "AWS_ACCESS_KEY_ID": "flywheel",
    "AWS_SECRET_ACCESS_KEY": SECRET,
}


def test_plain_paths_and_file_uris_are_absolute_local_directories(tmp_path: Path) -> None:
    assert StorageLocation.parse(str(tmp_path)).path == str(tmp_path)
    assert StorageLocation.parse(tmp_path.as_uri(), {}).path == str(tmp_path)
    assert StorageLocation.parse("file://localhost/srv/lake", {}).path == "/srv/lake"
    relative = StorageLocation.parse("some/lake", {})
    assert relative.scheme == "file" and relative.path == str(Path("some/lake").absolute())
    assert StorageLocation.parse(" /srv/lake ", {}).uri == "file:///srv/lake"


def test_s3_uris_name_the_bucket_and_prefix_with_settings_from_the_environment() -> None:
    location = StorageLocation.parse("s3://flywheel/lake/v1/", S3_ENV)
    assert (location.scheme, location.path) == ("s3", "flywheel/lake/v1")
    assert location.bucket == "flywheel"
    assert location.endpoint == "http://127.0.0.1:9000"
    assert location.region == "us-east-1"
    assert location.credentials is not None
    assert location.credentials.secret_access_key == SECRET
    assert location.uri == "s3://flywheel/lake/v1"
    assert StorageLocation.parse("s3://flywheel", {}).path == "flywheel"


def test_the_flywheel_endpoint_wins_and_aws_settings_fill_in() -> None:
    env = {
        "AWS_ENDPOINT_URL": "https://s3.example.com/",
        "AWS_DEFAULT_REGION": "eu-west-1",
    }
    location = StorageLocation.parse("s3://b-1/x", env)
    assert location.endpoint == "https://s3.example.com"
    assert location.region == "eu-west-1"
    assert location.credentials is None  # the AWS SDK's default chain
    both = StorageLocation.parse("s3://b-1/x", {**env, "FLYWHEEL_S3_ENDPOINT": "http://h:1"})
    assert both.endpoint == "http://h:1"


def test_the_secret_is_masked_in_repr_and_str() -> None:
    location = StorageLocation.parse("s3://flywheel/lake", S3_ENV)
    shown = [repr(location), str(location), f"{location}", repr(location.credentials)]
    assert all(SECRET not in text for text in shown)
    assert "secret_access_key='****'" in repr(location)
    assert "access_key_id='flywheel'" in repr(location)
    assert str(location) == "s3://flywheel/lake"


def test_child_locations_keep_the_settings() -> None:
    location = StorageLocation.parse("s3://flywheel/lake", S3_ENV).child("rewards", "p=0")
    assert location.path == "flywheel/lake/rewards/p=0"
    assert location.endpoint == "http://127.0.0.1:9000" and location.credentials is not None
    with pytest.raises(StorageError, match="not a single name"):
        location.child("../escape")


@pytest.mark.parametrize(
    ("uri", "fix"),
    [
        ("", "empty; use file:///absolute/path"),
        ("gs://bucket/x", "scheme 'gs' is not supported; use file:///"),
        ("s3a://bucket/x", "scheme 's3a' is not supported"),
        ("s3://Bucket/x", "not a valid bucket name"),
        ("s3://ab/x", "not a valid bucket name"),
        ("s3://user@bucket/x", "not a valid bucket name"),
        ("s3://bucket:9000/x", "not a valid bucket name"),
        ("s3:///x", "not a valid bucket name"),
        ("s3://bucket/a//b", "empty, '.' or '..' parts"),
        ("s3://bucket/a/../b", "empty, '.' or '..' parts"),
        ("s3://bucket/x?versionId=1", "no query or fragment"),
        ("file://otherhost/x", "not a local absolute file URI"),
        ("file:relative/x", "not a local absolute file URI"),
    ],
)
def test_a_bad_uri_is_a_clear_error_naming_the_fix(uri: str, fix: str) -> None:
    with pytest.raises(StorageError, match=re.escape(fix)):
        StorageLocation.parse(uri, {})


def test_inconsistent_s3_settings_name_the_fix(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="set both, or neither"):
        StorageLocation.parse("s3://bucket/x", {"AWS_ACCESS_KEY_ID": "k"})
    with pytest.raises(StorageError, match=r"set it to http\(s\)://host\[:port\]"):
        StorageLocation.parse("s3://bucket/x", {"FLYWHEEL_S3_ENDPOINT": "127.0.0.1:9000"})
    with pytest.raises(StorageError, match="FLYWHEEL_S3_CREDENTIALS_FILE"):
        StorageLocation.parse("s3://bucket/x", {"FLYWHEEL_S3_CREDENTIALS_FILE": str(tmp_path)})


def test_a_credentials_file_supplies_the_key_pair(tmp_path: Path) -> None:
    secrets_file = tmp_path / "credentials"
    secrets_file.write_text(
        f"# comment\nAWS_ACCESS_KEY_ID=flywheel\nexport AWS_SECRET_ACCESS_KEY={SECRET}\n"
    )
    env = {"FLYWHEEL_S3_CREDENTIALS_FILE": str(secrets_file)}
    location = StorageLocation.parse("s3://bucket/x", env)
    assert location.credentials == read_credentials_file(secrets_file)
    assert location.credentials is not None
    assert location.credentials.secret_access_key == SECRET
    # Variables in the environment win over the file.
    pair = StorageLocation.parse("s3://bucket/x", {**env, **S3_ENV}).credentials
    assert pair is not None and pair.access_key_id == "flywheel"
    secrets_file.write_text("AWS_ACCESS_KEY_ID=flywheel\n")
    with pytest.raises(StorageError, match=r"has no AWS_SECRET_ACCESS_KEY=\.\.\. line"):
        read_credentials_file(secrets_file)


def test_filesystems(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fs = pytest.importorskip("pyarrow.fs")
    assert isinstance(StorageLocation.parse(str(tmp_path), {}).filesystem(), fs.LocalFileSystem)
    for variable in CHECKSUM_VARIABLES:
        # setenv first, so the test's end restores the variable's state before it (set or not).
        monkeypatch.setenv(variable, "unset-by-the-test")
        monkeypatch.delenv(variable)
    s3 = StorageLocation.parse("s3://flywheel/lake", S3_ENV).filesystem()
    assert isinstance(s3, fs.S3FileSystem)
    assert s3.region == "us-east-1"
    assert os.environ["AWS_REQUEST_CHECKSUM_CALCULATION"] == "WHEN_REQUIRED"
    assert os.environ["AWS_RESPONSE_CHECKSUM_VALIDATION"] == "WHEN_REQUIRED"
