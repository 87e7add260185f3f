"""`python -m processors.lake ...` runs the `flywheel sink` command (same options)."""

from flywheel.commands.sink import sink

sink(prog_name="python -m processors.lake")
