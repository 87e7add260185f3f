"""The one rich console the CLI prints through (stderr for progress, stdout for results)."""

from rich.console import Console

out = Console()
err = Console(stderr=True)
