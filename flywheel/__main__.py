"""`python -m flywheel` runs the CLI."""

from flywheel.cli import main

main()
