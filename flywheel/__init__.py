"""Flywheel's composition root: settings read once from the environment, and the CLI."""
