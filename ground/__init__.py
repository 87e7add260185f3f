"""The ground floor every stage stands on, and nothing else: the root error (`ground.errors`),
durable file writes (`ground.durable`), the ASGI pieces the HTTP services share (`ground.asgi`)
and the per-service Prometheus registry (`ground.metrics`). It imports no other package of
Flywheel; import-linter (pyproject.toml) keeps it so."""
