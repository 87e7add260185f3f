"""PLACEHOLDER for the repo-gen branch's module (RepositoryEnvironment): only ``task_message``,
which RepoEpisode.reset imports, so the episode runs on this branch. The merge keeps theirs."""

from __future__ import annotations

from environments.repository.spec import RepoSpec


def task_message(spec: RepoSpec) -> str:
    """The user's message: what to fix and which files there are (never the hidden tests)."""
    tests = spec.test_file or "the tests"
    return f"Fix the repository so that {tests} passes. Files: {', '.join(sorted(spec.files))}."
