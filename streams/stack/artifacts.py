"""Java and Maven checks, and the stack's artifacts resolved from Maven Central.

Artifacts land in `<home>/stack/artifacts/<name>-<version>/`, written under a temporary name and
renamed when complete, so an interrupted download is never mistaken for a finished one. Maven's
own repository (~/.m2) caches the jars across state directories and CI runs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
from importlib import resources
from pathlib import Path

from streams.errors import StackError
from streams.stack import versions

_JAVA_VERSION = re.compile(r'version "(\d+)(?:\.(\d+))?[^"]*"')
_INSTALL_JAVA = (
    "install a Java 17+ runtime (Debian/Ubuntu: `apt-get install openjdk-17-jre-headless`) "
    "or put one on PATH / set JAVA_HOME"
)


def parse_java_major(version_output: str) -> int:
    """The major version from `java -version` output ("1.8.0_292" -> 8, "17.0.15" -> 17)."""
    match = _JAVA_VERSION.search(version_output)
    if match is None:
        raise StackError(f"cannot read the Java version from {version_output[:200]!r}")
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def java_executable() -> str:
    """Path of a `java` of at least the pinned major version; StackError naming the fix if not."""
    java_home = os.environ.get("JAVA_HOME")
    candidate = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if candidate is None or not Path(candidate).exists():
        raise StackError(f"Java was not found: {_INSTALL_JAVA}")
    out = subprocess.run([candidate, "-version"], capture_output=True, text=True, check=False)
    major = parse_java_major(out.stderr + out.stdout)
    if major < versions.JAVA_MIN_MAJOR:
        raise StackError(
            f"{candidate} is Java {major}, the local stack needs Java "
            f"{versions.JAVA_MIN_MAJOR}+: {_INSTALL_JAVA}"
        )
    return candidate


def maven_executable() -> str:
    """Path of `mvn`; StackError naming the fix if it is missing."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise StackError(
            "Maven (mvn) was not found; it resolves the stack's servers from Maven Central: "
            "install it (Debian/Ubuntu: `apt-get install maven`)"
        )
    return mvn


def _run_maven(args: list[str], cwd: Path, what: str) -> None:
    result = subprocess.run(
        [maven_executable(), "-B", "-q", *args], cwd=cwd, capture_output=True, text=True
    )
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-15:])
        raise StackError(
            f"Maven could not resolve {what} (exit {result.returncode}); check network access "
            f"to Maven Central or a mirror in ~/.m2/settings.xml. Maven said:\n{tail}"
        )


def _complete(target: Path) -> bool:
    return (target / ".complete").exists()


def _fresh_tmp(target: Path) -> Path:
    tmp = target.with_name(target.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def _publish(tmp: Path, target: Path) -> Path:
    (tmp / ".complete").touch()
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return target


def kafka_libs(artifacts: Path) -> Path:
    """Directory holding the broker's runtime classpath (kafka_2.13 + log4j2 binding)."""
    target = artifacts / f"kafka-{versions.KAFKA_VERSION}"
    if _complete(target):
        return target
    tmp = _fresh_tmp(target)
    with resources.as_file(resources.files("streams.stack") / "pom.xml") as pom:
        _run_maven(
            [
                "-f",
                str(pom),
                f"-Dkafka.version={versions.KAFKA_VERSION}",
                f"-Dlog4j.version={versions.LOG4J_VERSION}",
                "dependency:copy-dependencies",
                "-DincludeScope=runtime",
                f"-DoutputDirectory={tmp}",
            ],
            cwd=tmp,
            what=f"Apache Kafka {versions.KAFKA_VERSION}",
        )
    return _publish(tmp, target)


def _copy_artifact(coordinate: str, tmp: Path, what: str) -> None:
    # dependency:copy needs no project; run it where no pom.xml can be picked up.
    _run_maven(
        ["dependency:copy", f"-Dartifact={coordinate}", f"-DoutputDirectory={tmp}"],
        cwd=tmp,
        what=what,
    )


def _maven_artifact(target: Path, coordinate: str, what: str, *, unpack: bool = False) -> Path:
    """`target`, holding the Maven artifact `coordinate` (with `unpack`, its tar.gz unpacked),
    fetched once."""
    if not _complete(target):
        tmp = _fresh_tmp(target)
        _copy_artifact(coordinate, tmp, what)
        if unpack:
            archive = next(tmp.glob("*.tar.gz"))
            with tarfile.open(archive) as tar:
                tar.extractall(tmp, filter="data")
            archive.unlink()
        _publish(tmp, target)
    return target


def s3proxy_jar(artifacts: Path) -> Path:
    """Path of S3Proxy's self-contained jar (its classifier `jar-with-dependencies`)."""
    version = versions.S3PROXY_VERSION
    target = _maven_artifact(
        artifacts / f"s3proxy-{version}",
        f"org.gaul:s3proxy:{version}:jar:jar-with-dependencies",
        f"S3Proxy {version}",
    )
    jars = sorted(target.glob("s3proxy-*.jar"))
    if not jars:
        raise StackError(f"no S3Proxy jar in {target}; delete that folder and run again")
    return jars[0]


def apicurio_app(artifacts: Path) -> Path:
    """Path of Apicurio Registry's runner jar, downloaded and unpacked once."""
    version = versions.APICURIO_VERSION
    target = _maven_artifact(
        artifacts / f"apicurio-{version}",
        f"io.apicurio:apicurio-registry-app:{version}:tar.gz:all",
        f"Apicurio Registry {version}",
        unpack=True,
    )
    jars = sorted(target.glob("*-runner.jar")) or sorted(target.glob("quarkus-run.jar"))
    if not jars:
        raise StackError(f"no runnable jar in {target}; delete that folder and run again")
    return jars[0]
