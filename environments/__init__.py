"""Where the agent acts: environments behind a small Protocol (`environments.base`), registered
by name in `ENVIRONMENTS`, the sandbox every completion runs in (`environments.sandbox`), and the
default family, program synthesis from examples (`environments.program_synthesis`), and
repositories fixed with tools over several turns (`environments.repository`). The rollout
workers, the learner's eval suite and the simulator's agent users all score through here."""

from environments.base import Environment, EnvironmentRegistry, Score, Task
from environments.program_synthesis import NAME as PROGRAM_SYNTHESIS
from environments.program_synthesis import ProgramSynthesis
from environments.repository.environment import RepositoryEnvironment
from environments.repository.spec import NAME as REPOSITORY

ENVIRONMENTS = EnvironmentRegistry()
ENVIRONMENTS.register(PROGRAM_SYNTHESIS, ProgramSynthesis)
ENVIRONMENTS.register(REPOSITORY, RepositoryEnvironment)  # multi-turn: ENVIRONMENTS.get_any

__all__ = ["ENVIRONMENTS", "PROGRAM_SYNTHESIS", "REPOSITORY", "Environment", "Score", "Task"]
