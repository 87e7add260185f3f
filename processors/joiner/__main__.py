"""`python -m processors.joiner ...` runs the `flywheel process` command (same options)."""

from flywheel.commands.process import process

process(prog_name="python -m processors.joiner")
