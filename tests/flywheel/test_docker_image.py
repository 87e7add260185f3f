"""The platform image ships what the CLI needs, and compose gives the sandbox what it needs.

No Docker here: the Dockerfile's instructions, `.dockerignore` and `docker-compose.yml` are
parsed and checked against `pyproject.toml` and the source tree. The image's files are modelled
as Docker builds them: the build context (the repository less what `.dockerignore` drops), then
each COPY of the context into the WORKDIR in force (docs/operations.md, the compose section and
"Sandbox isolation for model-written code").
"""

from __future__ import annotations

import ast
import json
import os
import posixpath
import re
import shlex
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
COMPOSE = ROOT / "docker-compose.yml"
CACHE_DIRS = {"__pycache__"}  # build caches: never expected in the image
CACHE_SUFFIXES = (".pyc",)


# --- the Dockerfile, as Docker reads it ----------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case: FROM, RUN, COPY, ...
    args: str  # the rest of the instruction, continuation lines joined
    workdir: str  # the WORKDIR in force when it runs
    user: str  # the USER in force ("root" before any USER)


@cache
def _instructions() -> tuple[Instruction, ...]:
    """The Dockerfile's instructions: comment lines dropped (also inside a continuation), lines
    ending in a backslash joined, WORKDIR and USER tracked."""
    logical: list[str] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    if pending:
        logical.append(pending)
    out: list[Instruction] = []
    workdir, user = "/", "root"
    for line in logical:
        keyword, _, args = line.partition(" ")
        keyword, args = keyword.upper(), args.strip()
        if keyword == "WORKDIR":
            workdir = posixpath.normpath(posixpath.join(workdir, args))
        if keyword == "USER":
            user = args.split(":")[0]
        out.append(Instruction(keyword, args, workdir, user))
    return tuple(out)


def _runs() -> list[tuple[int, Instruction]]:
    return [(i, ins) for i, ins in enumerate(_instructions()) if ins.keyword == "RUN"]


def _editable_install() -> tuple[int, Instruction]:
    """The RUN that installs the packages in place (`uv pip install ... -e .`)."""
    found = [(i, r) for i, r in _runs() if "uv pip install" in r.args and "-e ." in r.args]
    assert len(found) == 1, f"expected one `uv pip install ... -e .` RUN, found {len(found)}"
    return found[0]


def _copy_operands(args: str) -> tuple[list[str], str] | None:
    """(sources, destination) of a COPY or ADD; None for one from another stage or image."""
    tokens = [str(t) for t in json.loads(args)] if args.startswith("[") else shlex.split(args)
    flags = [t for t in tokens if t.startswith("--")]
    if any(f.startswith("--from") for f in flags):
        return None
    operands = [t for t in tokens if not t.startswith("--")]
    assert len(operands) >= 2, f"COPY {args}: needs a source and a destination"
    return operands[:-1], operands[-1]


# --- .dockerignore, as Docker applies it ---------------------------------------------------------


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """Docker's .dockerignore syntax: `**` any number of directories, `*` and `?` within one."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


@cache
def _ignore_rules() -> tuple[tuple[bool, re.Pattern[str]], ...]:
    rules: list[tuple[bool, re.Pattern[str]]] = []
    for raw in (ROOT / ".dockerignore").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = posixpath.normpath(line.removeprefix("!").strip()).lstrip("/")
        rules.append((negate, _pattern_regex(pattern)))
    return tuple(rules)


def _ignored(relative: str) -> bool:
    """Whether Docker leaves `relative` out of the build context: the last rule matching it or
    one of its parent directories decides."""
    parts = relative.split("/")
    candidates = ["/".join(parts[: k + 1]) for k in range(len(parts))]
    excluded = False
    for negate, regex in _ignore_rules():
        if any(regex.match(c) for c in candidates):
            excluded = not negate
    return excluded


def _files_under(directory: Path) -> list[str]:
    """Every file below `directory`, as a path relative to the repository root."""
    found: list[str] = []
    for parent, dirs, files in os.walk(directory):
        dirs.sort()
        for name in sorted(files):
            found.append((Path(parent) / name).relative_to(ROOT).as_posix())
    return found


# --- the image's files ---------------------------------------------------------------------------


@cache
def _image_files(before: int | None = None) -> dict[str, str]:
    """Image path -> repository path of every file the COPY lines (those before instruction
    index `before`, or all) bring in from the build context."""
    image: dict[str, str] = {}
    for index, ins in enumerate(_instructions()):
        if before is not None and index >= before:
            break
        if ins.keyword not in ("COPY", "ADD"):
            continue
        operands = _copy_operands(ins.args)
        if operands is None:
            continue
        sources, dest = operands
        dest_path = posixpath.join(ins.workdir, dest)
        into_directory = dest.endswith("/") or len(sources) > 1
        for source in sources:
            path = ROOT / source
            assert path.exists(), f"COPY {ins.args}: {source} is not in the repository"
            if path.is_dir():  # its contents land in dest
                for rel in _files_under(path):
                    if not _ignored(rel):
                        inside = Path(rel).relative_to(path.relative_to(ROOT)).as_posix()
                        image[posixpath.normpath(posixpath.join(dest_path, inside))] = rel
            elif not _ignored(source):
                target = posixpath.join(dest_path, path.name) if into_directory else dest_path
                image[posixpath.normpath(target)] = source
    return image


def _installed_files() -> tuple[str, dict[str, str]]:
    """(install dir, files in the image) when the editable install runs."""
    index, install = _editable_install()
    return install.workdir, _image_files(index)


@cache
def _pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _packages() -> list[str]:
    """Top-level packages: pyproject's [tool.setuptools.packages.find] include patterns."""
    include: list[str] = _pyproject()["tool"]["setuptools"]["packages"]["find"]["include"]
    return sorted({pattern.rstrip("*").rstrip(".") for pattern in include})


def _is_cache(relative: str) -> bool:
    return bool(CACHE_DIRS & set(relative.split("/"))) or relative.endswith(CACHE_SUFFIXES)


# --- Dockerfile tests ----------------------------------------------------------------------------


def test_dockerignore_keeps_caches_state_and_secrets_out_and_the_sources_in() -> None:
    for dropped in (".git/HEAD", ".venv/bin/python", "flywheel/__pycache__/cli.cpython-311.pyc",
                    "learner/x.pyc", "tests/flywheel/test_cli.py", ".env", "prod.env",
                    ".flywheel/gateway/keys.json", "flywheel_platform.egg-info/PKG-INFO",
                    "bench/soak.py"):  # fmt: skip
        assert _ignored(dropped), f".dockerignore sends {dropped} to the build"
    for kept in ("pyproject.toml", "overrides.txt", "README.md", "flywheel/cli.py",
                 "learner/recipes/agent_rl/configs/rl.yaml", "schemas/avro/history/Reward/v3.avsc",
                 "streams/stack/pom.xml"):  # fmt: skip
        assert not _ignored(kept), f".dockerignore drops {kept}"


def test_every_file_of_every_package_is_in_the_image_at_its_place() -> None:
    """Each top-level package of pyproject.toml is a directory of the repository, and every file
    under it (code, configs, schemas; not caches) is where the editable install imports it."""
    install_dir, image = _installed_files()
    assert install_dir == "/opt/flywheel"
    packages = _packages()
    assert {"flywheel", "ground", "environments", "policies", "fleet", "model_registry"} <= set(
        packages
    )
    missing: list[str] = []
    for package in packages:
        assert (ROOT / package / "__init__.py").is_file(), f"pyproject names {package}: no package"
        for rel in _files_under(ROOT / package):
            if not _is_cache(rel) and posixpath.join(install_dir, rel) not in image:
                missing.append(rel)
    assert not missing, f"not in the image at {install_dir}/: {missing[:20]} ({len(missing)})"


def test_package_data_is_declared_truthfully_and_shipped() -> None:
    """Each [tool.setuptools.package-data] glob matches files (a stale one would hide a moved
    config) and those files are in the image; so is every recipe's config folder."""
    install_dir, image = _installed_files()
    package_data: dict[str, list[str]] = _pyproject()["tool"]["setuptools"]["package-data"]
    for package, globs in package_data.items():
        base = ROOT / package.replace(".", "/")
        for pattern in globs:
            matches = [p for p in base.glob(pattern) if p.is_file()]
            assert matches, f"package-data {package}: {pattern} matches nothing"
            for path in matches:
                rel = path.relative_to(ROOT).as_posix()
                assert posixpath.join(install_dir, rel) in image, f"{rel} is not in the image"
    runtime_yaml = sorted((ROOT / "learner" / "recipes").glob("*/configs/*.yaml"))
    runtime_yaml += [*(ROOT / "simulator" / "configs").glob("*.yaml")]
    runtime_yaml += [ROOT / "feature_store" / "features.yaml"]
    assert {p.parents[1].name for p in runtime_yaml} >= {"gate", "agent_sft", "agent_rl"}
    for path in runtime_yaml:
        rel = path.relative_to(ROOT).as_posix()
        assert posixpath.join(install_dir, rel) in image, f"{rel} is not in the image"


def test_the_cli_entry_point_and_every_command_module_ship_with_the_install_metadata() -> None:
    from flywheel.cli import COMMANDS  # click and two small modules: cheap

    install_dir, image = _installed_files()
    script = _pyproject()["project"]["scripts"]["flywheel"]
    module = script.split(":")[0]
    assert posixpath.join(install_dir, module.replace(".", "/") + ".py") in image
    for command in COMMANDS:
        path = f"flywheel/commands/{command.replace('-', '_')}.py"
        assert (ROOT / path).is_file(), f"cli.COMMANDS names {command}: no {path}"
        assert posixpath.join(install_dir, path) in image, f"{path} is not in the image"
    # The dependency layer is installed from the metadata alone, before any package is copied.
    deps = [(i, r) for i, r in _runs() if "-r pyproject.toml" in r.args]
    assert deps, "no `uv pip install ... -r pyproject.toml` RUN for the dependency layer"
    index, run = deps[0]
    assert "--override overrides.txt" in run.args
    assert "--extra platform" in run.args, "the image runs the whole platform, not the light SDK"
    before = _image_files(index)
    readme = _pyproject()["project"]["readme"]
    for name in ("pyproject.toml", "overrides.txt", readme):
        assert posixpath.join(run.workdir, name) in before, f"{name} not copied before {run.args}"
    assert not any(p.startswith(f"{run.workdir}/flywheel/") for p in before)


def _first_party_roots() -> set[str]:
    """Top-level names an `import x` in this repository could mean: its modules and the
    directories holding Python files at their top (packages, and bench/ and tests/, which do
    not ship). Not recursive: a local lake/ can be large."""
    names = {p.stem for p in ROOT.glob("*.py")}
    for entry in ROOT.iterdir():
        if entry.is_dir() and not entry.name.startswith(".") and any(entry.glob("*.py")):
            names.add(entry.name)
    return names


def test_shipped_code_imports_only_shipped_packages() -> None:
    """No shipped module imports first-party code the image lacks (bench/, tests/, a package
    left out of pyproject): the image would fail where that import runs."""
    install_dir, image = _installed_files()
    shipped = set(_packages())
    first_party = _first_party_roots()
    assert {"bench", "tests"} <= first_party
    problems: list[str] = []
    for image_path, rel in sorted(image.items()):
        if not rel.endswith(".py") or not image_path.startswith(install_dir + "/"):
            continue
        tree = ast.parse((ROOT / rel).read_text(), filename=rel)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in first_party and top not in shipped:
                    problems.append(f"{rel}:{node.lineno} imports {name}")
    assert not problems, problems


def test_the_image_installs_bubblewrap_runs_as_uid_10001_and_checks_that_the_cli_starts() -> None:
    instructions = _instructions()
    runs = _runs()
    apt = [r.args for _, r in runs if "apt-get install" in r.args]
    assert apt, "no apt-get install RUN"
    install = next(a for a in apt if re.search(r"\bbubblewrap\b", a))
    assert "--no-install-recommends" in install
    assert "rm -rf /var/lib/apt/lists" in install, "apt lists left in the layer"
    assert "bwrap --version" in install
    assert not any("privileged" in r.args for _, r in runs)

    useradd = [s for _, r in runs for s in r.args.split("&&") if "useradd" in s]
    assert len(useradd) == 1, "expected one useradd"
    tokens = shlex.split(useradd[0])
    assert tokens[tokens.index("--uid") + 1] == "10001"
    final = instructions[-1].user
    assert final == tokens[-1] == "flywheel", f"the image runs as {final}"
    assert all(ins.user != "root" for ins in instructions if ins.keyword == "ENTRYPOINT")
    assert not any(ins.args.split(":")[0] in ("root", "0") for ins in instructions
                   if ins.keyword == "USER")  # fmt: skip

    install_index, _ = _editable_install()
    after = [r for i, r in runs if i > install_index and r.user == "flywheel"]
    commands = " ".join(r.args for r in after)
    assert "flywheel --help" in commands, "the build does not check that the CLI starts"
    assert "flywheel --version" in commands
    # A build step has no namespaces to create: the sandbox check belongs to the running service.
    assert not any("doctor" in r.args for _, r in runs), "doctor cannot pass in a build step"


# --- docker-compose.yml: the sandbox of model-written code ---------------------------------------

ROOT_OPTIONS_WITH_VALUE = ("--log-format", "--log-level")
ROOT_FLAGS = ("--trust-model-code",)
MODEL_CODE_COMMANDS = {"rollouts", "agent-users", "demo"}
MODEL_CODE_RECIPES = {"agent", "agent-sft"}  # `learn --recipe ...`: the eval suite runs programs


def _services() -> dict[str, Any]:
    services: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())["services"]
    return services


def _subcommand(command: list[str]) -> tuple[str, list[str]]:
    """The `flywheel` subcommand of a service command and its arguments (root options skipped)."""
    args = list(command)
    while args:
        head = args[0]
        if head in ROOT_OPTIONS_WITH_VALUE:
            args = args[2:]
        elif head.startswith(tuple(f"{o}=" for o in ROOT_OPTIONS_WITH_VALUE)) or head in ROOT_FLAGS:
            args = args[1:]
        else:
            return head, args[1:]
    return "", []


def _runs_model_code(service: dict[str, Any]) -> bool:
    if service.get("image") != "flywheel-platform:0.1.0" or "command" not in service:
        return False
    name, args = _subcommand([str(a) for a in service["command"]])
    if name in MODEL_CODE_COMMANDS:
        return True
    if name != "learn":
        return False
    recipe = "gate"
    for i, arg in enumerate(args):
        if arg == "--recipe" and i + 1 < len(args):
            recipe = args[i + 1]
        elif arg.startswith("--recipe="):
            recipe = arg.split("=", 1)[1]
    return recipe in MODEL_CODE_RECIPES


def _security_opts(service: dict[str, Any]) -> dict[str, str]:
    """security_opt as key -> value (`k=v`, or the deprecated `k:v` the daemon still reads)."""
    out: dict[str, str] = {}
    for opt in service.get("security_opt", []):
        key, sep, value = str(opt).partition("=")
        if not sep:
            key, _, value = str(opt).partition(":")
        out[key] = value
    return out


def test_the_subcommand_parser_finds_model_code_behind_root_options() -> None:
    learn = {"image": "flywheel-platform:0.1.0"}
    assert _runs_model_code({**learn, "command": ["--log-format", "json", "rollouts"]})
    assert _runs_model_code({**learn, "command": ["learn", "--recipe", "agent"]})
    assert _runs_model_code({**learn, "command": ["learn", "--recipe=agent-sft"]})
    assert not _runs_model_code({**learn, "command": ["learn", "--model", "suggestion-gate"]})
    assert not _runs_model_code({**learn, "command": ["simulate", "--rate", "20"]})


def test_services_running_model_code_get_what_bubblewrap_needs_and_no_more() -> None:
    services = _services()
    model_code = {name: s for name, s in services.items() if _runs_model_code(s)}
    assert "rollouts" in model_code
    for name, service in model_code.items():
        opts = _security_opts(service)
        # Docker's default seccomp profile blocks unshare/mount/pivot_root: unconfined, or a
        # custom profile file (compose reads a path relative to docker-compose.yml).
        seccomp = opts.get("seccomp")
        assert seccomp == "unconfined" or (
            seccomp is not None and (COMPOSE.parent / seccomp).is_file()
        ), f"{name}: seccomp={seccomp}"
        # docker-default denies mount: unconfined or a profile of the operator's.
        assert opts.get("apparmor") not in (None, "", "docker-default"), f"{name}: apparmor"
        # Masked /proc paths forbid bwrap's fresh /proc; compose knows only this exact spelling.
        assert "systempaths=unconfined" in service["security_opt"], f"{name}: systempaths"
        assert opts.get("no-new-privileges") == "true", f"{name}: no-new-privileges"
        assert service.get("cap_drop") == ["ALL"], f"{name}: cap_drop"
        assert not service.get("cap_add"), f"{name}: bwrap needs no capability"
        assert not service.get("privileged"), f"{name}: privileged"
        user = str(service.get("user", "")).split(":")[0]
        assert user in ("", "10001", "flywheel"), f"{name}: runs as {user}, not the image's user"
        env = service.get("environment") or {}
        assert "FLYWHEEL_TRUST_MODEL_CODE" not in env, f"{name}: compose must not trust the code"
        assert "--trust-model-code" not in service["command"], f"{name}: trusts the code"
        test = [str(t) for t in service["healthcheck"]["test"]]
        assert test[:3] == ["CMD", "flywheel", "doctor"], f"{name}: healthcheck {test}"
        checks = [test[i + 1] for i, t in enumerate(test[:-1]) if t == "--check"]
        assert "sandbox" in checks, f"{name}: the healthcheck does not check the sandbox"


def _doctor_checks(args: list[str]) -> list[str] | None:
    """The checks a `flywheel doctor` invocation runs (["*"]: all of them, `sandbox` included);
    None when it is another command."""
    name, rest = _subcommand(args)
    if name != "doctor":
        return None
    checks = [rest[i + 1] for i, a in enumerate(rest[:-1]) if a == "--check"]
    return checks or ["*"]


def test_other_services_keep_dockers_confinement_and_skip_the_sandbox_check() -> None:
    """A container with Docker's default confinement cannot build the sandbox: its doctor (the
    on-demand `doctor` service, healthchecks) must not check it, or it fails for good."""
    others = {n: s for n, s in _services().items() if not _runs_model_code(s)}
    assert {"gateway", "joiner", "sink", "learner", "doctor"} <= set(others)
    for name, service in others.items():
        relaxed = [o for o in service.get("security_opt", []) if "unconfined" in str(o)]
        assert not relaxed, f"{name} runs no model code but has {relaxed}"
        assert not service.get("privileged"), f"{name}: privileged"
        if service.get("image") != "flywheel-platform:0.1.0":
            continue
        invocations = [[str(a) for a in service["command"]]]
        test = [str(t) for t in service["healthcheck"]["test"]]
        if test[:2] == ["CMD", "flywheel"]:
            invocations.append(test[2:])
        for args in invocations:
            checks = _doctor_checks(args)
            assert checks is None or not {"sandbox", "*"} & set(checks), (
                f"{name}: `flywheel {' '.join(args)}` checks the sandbox where none can be built"
            )
