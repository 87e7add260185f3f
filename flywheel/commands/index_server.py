"""`flywheel index serve`: the codebase index server (docs/index.md).

The app is `codeindex.server.app.create_app`; this module wires it to the embedder, the index's
topics (rebuilt from, then followed), the gateway's key store and uvicorn. Everything heavy
(numpy, usearch, torch, the Kafka clients) is imported inside the command, so the `index` group
loads on a light install.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

from flywheel.commands.serve import default_replica_id
from flywheel.console import err, out
from flywheel.listen import listen, run_server
from flywheel.metrics import metrics_endpoint, metrics_options
from flywheel.options import listen_options
from flywheel.settings import Settings

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from codeindex.server.embedder import ChunkEmbedder
    from codeindex.server.events import IndexEventLog, IndexFollower, IndexTopics
    from codeindex.server.service import IndexService
    from model_registry.registry import ModelRegistry
    from streams.gateway.keys import ApiKeyStore

DEFAULT_PORT = 8092  # the gateway has 8088, features 8090, model serving 8091 (docs/cli.md)


def load_embedder(directory: Path | None) -> ChunkEmbedder:
    """The code embedder of `codeindex.embedding`: from `directory`, else the shipped one."""
    try:
        # Typed once the embedder's package is in the tree; until then mypy finds no module.
        from codeindex.embedding.embedder import (  # type: ignore[import-not-found,import-untyped,unused-ignore]
            load_default_embedder,
        )
        from codeindex.embedding.embedder import (  # type: ignore[import-not-found,import-untyped,unused-ignore]
            load_embedder as load_from,
        )
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("codeindex"):
            raise  # torch or transformers: the CLI names the `platform` extra
        raise click.ClickException(
            "the code embedder (codeindex.embedding) is not part of this build; install a "
            "build that has it (docs/index.md, 'The embedder')"
        ) from None
    embedder: ChunkEmbedder = load_default_embedder() if directory is None else load_from(directory)
    return embedder


def registered_embedder_dir(registry: ModelRegistry, spec: str) -> Path:
    """The artifact directory of the registry's embedder ``spec``: ``NAME`` (the version its
    production channel points at) or ``NAME:VERSION`` (as `flywheel learn --recipe
    code-embedder` registers them), verified against its registered hash first, as a serving
    replica verifies its model. ModelRegistryError (ArtifactError) naming the fix for an
    unknown name or version, no production version, or a changed or missing artifact."""
    from model_registry.artifacts import verify_artifact
    from model_registry.errors import ModelRegistryError
    from schemas.enums import Channel

    name, _, version = spec.partition(":")
    if version:
        if not version.isdigit():
            raise ModelRegistryError(f"{spec!r}: the version after ':' must be a number")
        state = registry.version(name, int(version))
        uri, sha256 = state.artifact.uri, state.artifact.sha256
    else:
        production = registry.channels(name).get(Channel.PRODUCTION)
        if production is None:
            raise ModelRegistryError(
                f"{name} has no production version; name one as {name}:VERSION (`flywheel "
                f"models list --model {name}`) or train one (`flywheel learn --recipe "
                "code-embedder`)"
            )
        uri, sha256 = production.artifact_uri, production.artifact_sha256
    return verify_artifact(uri, sha256)


@dataclass
class IndexServer:
    """A wired index server: its app, service and event log, and the follower of its topics."""

    app: Starlette
    service: IndexService
    events: IndexEventLog
    follower: IndexFollower

    def close(self) -> None:
        """Stop following the topics (the app's own server is the caller's to stop)."""
        self.follower.close()


def build_index_server(
    settings: Settings,
    embedder: ChunkEmbedder,
    keys: ApiKeyStore | None,
    topics: IndexTopics,
    replica_id: str,
) -> IndexServer:
    """The index app over `embedder`, rebuilt from `topics` (from their beginning to their end
    now, then followed in a thread) and publishing its changes there; `keys` None serves
    without auth. Raises EventLogError when a topic is missing or the rebuild times out."""
    from codeindex.server.app import create_app
    from codeindex.server.events import IndexEventLog, LogApplier, rebuild
    from codeindex.server.service import IndexService
    from codeindex.server.state import IndexState
    from flywheel.clients import codec as make_codec
    from streams.topic_io import EventProducer

    origin = f"{replica_id}/{uuid.uuid4().hex[:8]}"  # new per process: a rebuild applies all
    codec = make_codec(settings)
    state = IndexState(embedder.dim)
    applier = LogApplier(
        state, codec, embedder_name=embedder.name, embedder_version=embedder.version,
        topics=topics, origin=origin,
    )  # fmt: skip
    follower = rebuild(settings.kafka_client_config(), applier, topics)
    events = IndexEventLog(
        EventProducer(settings.kafka_client_config()), codec, embedder_name=embedder.name,
        embedder_version=embedder.version, dim=embedder.dim,
        producer=f"codeindex.server/{replica_id}", origin=origin, topics=topics,
    )  # fmt: skip
    service = IndexService(state, embedder, events)
    app = create_app(service, keys=keys, ready=follower.caught_up.is_set)
    return IndexServer(app, service, events, follower)


@click.command()
@listen_options(DEFAULT_PORT)
@click.option(
    "--embedder",
    "embedder_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Embedder directory: ours, or any local Hugging Face sentence-embedding checkpoint. "
    "Default: the one shipped with the package.",
)
@click.option(
    "--embedder-model",
    "embedder_model",
    metavar="NAME[:VERSION]",
    default=None,
    help="A registered embedder instead (`flywheel learn --recipe code-embedder --model NAME`): "
    "its production version, or VERSION; its artifact is verified, then loaded.",
)
@click.option(
    "--replica-id",
    default=None,
    help="This server's id in events' producer field. Default: <hostname>-<pid>.",
)
@click.option(
    "--files-topic",
    default="index.files",
    show_default=True,
    help="Topic of file entries (a copy of index.files, e.g. a test's).",
)
@click.option(
    "--embeddings-topic",
    default="index.embeddings",
    show_default=True,
    help="Topic of chunk embeddings (a copy of index.embeddings).",
)
@click.option(
    "--no-auth",
    is_flag=True,
    help="Serve without API keys (local experiments only). Default: keys of "
    "`flywheel gateway add-key`.",
)
@metrics_options
def serve(
    host: str,
    port: int,
    embedder_dir: Path | None,
    embedder_model: str | None,
    replica_id: str | None,
    files_topic: str,
    embeddings_topic: str,
    no_auth: bool,
    metrics_port: int,
    metrics_host: str,
) -> None:
    """Serve the codebase index's sync protocol and search until Ctrl-C or SIGTERM.

    First rebuilds the index from the index's topics (every workspace's tree and every
    embedding of this embedder), then follows them, so any number of replicas serve reads;
    changes a client syncs are published there. Chunk texts are embedded and dropped, never
    stored. Routes: /v1/index/{ws}/root|children|files|chunks|search|status, DELETE
    /v1/index/{ws} (erase), GET /healthz, GET /metrics. See docs/index.md.
    """
    from codeindex.server.events import IndexTopics
    from streams.gateway.keys import ApiKeyStore, default_key_path

    if embedder_dir is not None and embedder_model is not None:
        raise click.UsageError("pass --embedder DIR or --embedder-model NAME, not both")
    settings = Settings.from_env()
    sock = listen(host, port)  # before the slow parts: a busy port fails fast and clearly
    if embedder_model is not None:
        from flywheel.clients import codec
        from model_registry.registry import ModelRegistry

        registry = ModelRegistry(settings.kafka_client_config(), codec(settings))
        embedder_dir = registered_embedder_dir(registry, embedder_model)
    embedder = load_embedder(embedder_dir)
    keys = None if no_auth else ApiKeyStore(default_key_path(settings.home))
    if keys is not None and not any(not r.revoked for r in keys.records()):
        err.print(
            "[yellow]no active API keys[/]: every request will get 401; add one with "
            "`flywheel gateway add-key NAME` (or pass --no-auth for a local experiment)"
        )
    err.print(f"rebuilding from {files_topic} and {embeddings_topic} ...")
    server = build_index_server(
        settings, embedder, keys, IndexTopics(files_topic, embeddings_topic),
        replica_id or default_replica_id(),
    )  # fmt: skip
    state = server.service.state
    out.print(
        f"[green]index[/] on http://{host}:{port} with {embedder.name}:{embedder.version} "
        f"(dim {embedder.dim}): {len(state.workspaces())} workspace(s), "
        f"{state.embedding_count()} embedding(s) from the topics; broker "
        f"{settings.kafka_bootstrap}; Ctrl-C to stop"
    )
    try:
        with metrics_endpoint(metrics_port, metrics_host, server.service.metrics.registry):
            run_server(server.app, sock)
    finally:
        server.close()
        out.print(f"index stopped: {server.events.published} record(s) published")
