"""Fail closed before running model-written code: the start-up check of every command that does.

`flywheel rollouts`, `flywheel agent-users`, `flywheel learn --recipe agent|agent-sft` (their
eval suite) and `flywheel demo` call :func:`require_model_code_isolation` before they start:
where this machine cannot isolate such code (environments/isolation.py) they stop with what is
missing and the fix, unless the operator said the code is trusted (`flywheel
--trust-model-code`), which they then say loudly on every start.
"""

from __future__ import annotations

import logging

from environments.isolation import TRUST_ENV, Isolation, require_isolation
from flywheel.console import err

log = logging.getLogger(__name__)


def require_model_code_isolation(service: str) -> Isolation:
    """The isolation ``service`` runs model-written code under; logs it once. Raises
    SandboxUnavailableError (the CLI's one-line message, exit 1) where there is none and the
    operator did not trust the code."""
    isolation = require_isolation()
    if isolation.available:
        err.print(f"[green]sandbox[/]: {isolation.detail}", highlight=False)
        log.info("%s: model-written code runs under %s", service, isolation.detail)
    else:
        err.print(
            f"[bold red]WARNING: model-written code runs WITHOUT isolation[/] ({TRUST_ENV}=1, "
            f"`flywheel --trust-model-code`): {isolation.detail}. Only resource limits and an "
            "in-process audit hook stand between it and this host.",
            highlight=False,
        )
        log.warning("%s: model-written code runs WITHOUT isolation: %s", service, isolation.detail)
    return isolation
