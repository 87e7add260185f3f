"""The gate recipe: reward rows of suggestions → MDS windows → the gate network, released by the
off-policy check on held-out rows. Configs: ``configs/default.yaml`` (every key with its
default), ``configs/with-features.yaml`` (feature-store inputs)."""

GATE_MODEL = "suggestion-gate"  # the model it trains unless `flywheel learn --model` names another
