"""Repositories with tests, generated and seeded, that the agent fixes with tools over several
turns (DESIGN §12): the task's definition (`spec`), the generator and its held-out split, the
tools and the episode that runs them in the sandbox on a private copy."""
