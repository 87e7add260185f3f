# The Flywheel platform image: one image, every service (`flywheel <command>`), see
# docker-compose.yml and docs/operations.md.
#
#   docker build -t flywheel-platform:0.1.0 .
#   docker run --rm flywheel-platform:0.1.0 doctor
#
# The install is the Makefile's (`uv pip install --override overrides.txt`): the `platform` extra,
# not `dev`.
# Model-written programs (rollouts, the agent recipes' eval suite, agent-users, demo) run under
# bubblewrap; the container needs the settings of docker-compose.yml's `rollouts` service for it
# (docs/operations.md, "Sandbox isolation for model-written code").
# tests/flywheel/test_docker_image.py checks that the COPY lines ship every package.
FROM python:3.11-slim

ARG UV_VERSION=0.13.8
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    FLYWHEEL_HOME=/var/lib/flywheel \
    FLYWHEEL_LAKE=/var/lib/flywheel/lake

# bubblewrap: the sandbox of model-written code. Debian's bwrap is not setuid (it relies on
# unprivileged user namespaces); the check keeps a setuid-root helper out of the image. Whether
# the namespaces are allowed is the runtime's business: `flywheel doctor --check sandbox`, not
# the build (a build step has no namespaces of its own to create).
RUN apt-get update \
 && apt-get install -y --no-install-recommends bubblewrap \
 && rm -rf /var/lib/apt/lists/* \
 && bwrap --version \
 && test ! -u "$(command -v bwrap)"

# A non-root user owns the state directory (FLYWHEEL_HOME: gateway keys, spools, models, lake).
RUN groupadd --system --gid 10001 flywheel \
 && useradd --system --uid 10001 --gid flywheel --home-dir /var/lib/flywheel --shell /usr/sbin/nologin flywheel \
 && mkdir -p /var/lib/flywheel/lake /var/lib/flywheel/models \
 && chown -R flywheel:flywheel /var/lib/flywheel

WORKDIR /opt/flywheel
RUN pip install "uv==${UV_VERSION}"
# Dependencies change less often than the code: installed from the metadata alone, this layer
# stays cached until pyproject.toml or overrides.txt change.
COPY pyproject.toml overrides.txt README.md ./
RUN uv pip install --system --no-cache --override overrides.txt -r pyproject.toml --extra platform
# Every top-level package of pyproject.toml ([tool.setuptools.packages.find]), one COPY each so
# each keeps its directory (a COPY of several directories merges their contents).
COPY ground ./ground
COPY schemas ./schemas
COPY streams ./streams
COPY contracts ./contracts
COPY processors ./processors
COPY analytics ./analytics
COPY feature_store ./feature_store
COPY policies ./policies
COPY environments ./environments
COPY model_registry ./model_registry
COPY codeindex ./codeindex
COPY learner ./learner
COPY fleet ./fleet
COPY simulator ./simulator
COPY flywheel ./flywheel
# Editable (-e): the packages are imported from /opt/flywheel, so every file under them ships
# (the recipes' YAML under learner/recipes/*/configs/ included).
RUN uv pip install --system --no-cache --no-deps -e .

USER flywheel:flywheel
WORKDIR /var/lib/flywheel
# The image starts, as the user that runs it: `--help` lists every command, so it imports every
# command module (torch, transformers, matplotlib with them); a missing package fails the build.
# matplotlib's font cache goes to a throwaway directory, not into the home volume.
RUN flywheel --version \
 && export MPLCONFIGDIR="$(mktemp -d)" \
 && flywheel --help >/dev/null \
 && rm -rf "$MPLCONFIGDIR"
VOLUME ["/var/lib/flywheel"]
ENTRYPOINT ["flywheel"]
CMD ["--help"]
