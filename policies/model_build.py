"""One lock around every transformers model build in the process.

transformers builds a model under process-global patches: ``from_pretrained`` swaps
``PreTrainedModel.tie_weights`` for a no-op on the class and sets torch's default dtype, and
``from_config`` sets the default dtype, each restored when the build ends. Two threads building at
once interleave those restores and can leave the process with tying disabled for good (seen with
transformers 5.17: every later load left the tied ``lm_head`` on the meta device). A server
hot-swapping a version while another loads, or a learner whose rollout fleet shares its process,
builds from several threads, so every build in Flywheel holds :data:`MODEL_BUILD_LOCK`.
"""

from __future__ import annotations

import threading

# Reentrant: a build may construct a sub-model (an encoder inside a wrapper) under the same lock.
MODEL_BUILD_LOCK = threading.RLock()
