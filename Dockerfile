# The Flywheel platform image: one image, every service (`flywheel <command>`), see
# docker-compose.yml and docs/operations.md.
#
#   docker build -t flywheel-platform:0.1.0 .
#   docker run --rm flywheel-platform:0.1.0 doctor
#
# The install is the Makefile's (`uv pip install --override overrides.txt`), without the dev extras.
FROM python:3.11-slim

ARG UV_VERSION=0.13.8
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    FLYWHEEL_HOME=/var/lib/flywheel \
    FLYWHEEL_LAKE=/var/lib/flywheel/lake

# A non-root user owns the state directory (FLYWHEEL_HOME: gateway keys, spools, models, lake).
RUN groupadd --system --gid 10001 flywheel \
 && useradd --system --uid 10001 --gid flywheel --home-dir /var/lib/flywheel --shell /usr/sbin/nologin flywheel \
 && mkdir -p /var/lib/flywheel/lake /var/lib/flywheel/models \
 && chown -R flywheel:flywheel /var/lib/flywheel

WORKDIR /opt/flywheel
RUN pip install "uv==${UV_VERSION}"
# Dependencies change less often than the code: copy the metadata first so this layer caches.
COPY pyproject.toml overrides.txt README.md ./
COPY flywheel ./flywheel
COPY streams ./streams
COPY schemas ./schemas
COPY processors ./processors
COPY learner ./learner
COPY feature_store ./feature_store
COPY simulator ./simulator
COPY analytics ./analytics
# Editable (-e): the packages' YAML files (learner/configs, simulator/configs,
# feature_store/features.yaml) are not declared as package data in pyproject.toml, so a
# regular wheel install would leave them out; the sources stay in /opt/flywheel instead.
RUN uv pip install --system --no-cache --override overrides.txt -e . \
 && flywheel --version

USER flywheel:flywheel
WORKDIR /var/lib/flywheel
VOLUME ["/var/lib/flywheel"]
ENTRYPOINT ["flywheel"]
CMD ["--help"]
