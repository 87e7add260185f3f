"""One repository episode: a private copy of the task's files, the tools on it, the final score
(environments.episodes.Episode; DESIGN §12).

The copy is a fresh ``mkdtemp`` (mode 0700) holding ``spec.files`` only: the hidden tests are
never written into it. ``read_file``, ``search`` and ``edit`` are file operations on it
(environments/repository/tools.py); ``run_tests`` and the final score run the copy's code in the
sandbox on throwaway copies of it (environments/repository/test_runner.py). Whatever the model
writes — no call, an unknown tool, bad arguments, a tool that fails — is an observation with a
status, never an exception. The episode ends at ``submit``, at ``limits.max_turns`` turns or
past ``limits.wall_s``, or when the runner calls :meth:`RepoEpisode.finish` (its token limit):
then the copy is scored as it stands and removed.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path, PurePosixPath

from environments.base import Task
from environments.episodes import (
    Ending,
    EpisodeLimits,
    Step,
    ToolOutcome,
    ToolStatus,
    truncate,
)
from environments.errors import TaskEnvironmentError
from environments.isolation import require_isolation
from environments.repository.generator import task_message
from environments.repository.spec import RepoSpec
from environments.repository.test_runner import run_tests, score_hidden
from environments.repository.tools import (
    TOOL_NAMES,
    ToolFailure,
    check_arguments,
    edit,
    read_file,
    search,
)
from environments.sandbox import SandboxLimits
from policies.agent_chat import ParsedTurn, ToolCall


class RepoEpisode:
    """An episode on a private copy of ``spec``'s repository. SandboxUnavailableError at once
    where this machine cannot isolate code (and the operator did not trust it);
    TaskEnvironmentError when a file of the spec would land outside the copy."""

    def __init__(
        self,
        task: Task,
        spec: RepoSpec,
        limits: EpisodeLimits | None = None,
        sandbox_limits: SandboxLimits | None = None,
    ) -> None:
        require_isolation()  # before any turn: an episode whose tests cannot run never starts
        self.task = task
        self.spec = spec
        self.limits = limits or EpisodeLimits()
        self.sandbox_limits = sandbox_limits or SandboxLimits()
        self.root = Path(tempfile.mkdtemp(prefix="flywheel-repo-"))
        self.turn = 0
        self._started = time.monotonic()
        self._final: Step | None = None
        try:
            _write_files(self.root, spec)
        except BaseException:
            self.close()
            raise

    def reset(self) -> str:
        """The user's message (the task); the wall clock starts here."""
        self._started = time.monotonic()
        return task_message(self.spec)

    def step(self, action: ParsedTurn) -> Step:
        if self._final is not None:
            outcome = ToolOutcome(self.turn, _name(action), "error", 0, 0, 0, False)
            return Step("error: the episode has ended", 0.0, True, outcome,
                        self._final.score, self._final.ended)  # fmt: skip
        self.turn += 1
        started = time.monotonic()
        call = action.call
        arguments_bytes = 0 if call is None else len(_arguments_json(call).encode())
        if self._over_wall_time():
            outcome = ToolOutcome(self.turn, _name(action), "error", 0, arguments_bytes, 0, False)
            return self._end("wall_time", f"error: wall time over {self.limits.wall_s:g}s", outcome)
        observation, status = self._act(action)
        text, truncated = truncate(observation, self.limits.observation_chars)
        outcome = ToolOutcome(self.turn, _name(action), status, _ms(started), arguments_bytes,
                              len(observation.encode()), truncated)  # fmt: skip
        if call is not None and call.name == "submit" and status == "ok":
            return self._end("submitted", text, outcome)
        if self.turn >= self.limits.max_turns:
            return self._end("max_turns", text, outcome)
        if self._over_wall_time():
            return self._end("wall_time", text, outcome)
        return Step(text, 0.0, False, outcome)

    def finish(self, ended: Ending) -> Step:
        """Score the copy as it stands and end the episode (the same final step if it ended)."""
        if self._final is not None:
            return self._final
        return self._end(ended, "", ToolOutcome(self.turn, "", "ok", 0, 0, 0, False))

    def close(self) -> None:
        """Remove the copy (idempotent)."""
        shutil.rmtree(self.root, ignore_errors=True)

    def _act(self, action: ParsedTurn) -> tuple[str, ToolStatus]:
        call = action.call
        if call is None:
            return f"error: {action.error or 'no tool call'}", "malformed"
        if call.name not in TOOL_NAMES:
            return (f"error: unknown tool {call.name[:64]!r}; tools: {', '.join(TOOL_NAMES)}",
                    "unknown_tool")  # fmt: skip
        problem = check_arguments(call.name, call.arguments)
        if problem is not None:
            return f"error: {problem}", "bad_arguments"
        args = call.arguments
        try:
            if call.name == "read_file":
                return read_file(self.root, args["path"], args.get("start"), args.get("end")), "ok"
            if call.name == "search":
                return search(self.root, args["query"]), "ok"
            if call.name == "edit":
                return edit(self.root, args["path"], args["old"], args["new"]), "ok"
            if call.name == "run_tests":
                return run_tests(self.root, args.get("selector") or "", self.spec.test_file,
                                 self.sandbox_limits)  # fmt: skip
        except ToolFailure as failure:
            return str(failure), "error"
        except OSError as exc:  # the copy itself failed us (disk full, …): still an observation
            return f"error: {call.name} failed ({exc.strerror})", "error"
        return "submitted", "ok"

    def _end(self, ended: Ending, observation: str, outcome: ToolOutcome) -> Step:
        score = score_hidden(self.root, self.spec.hidden, self.sandbox_limits)
        self.close()
        self._final = Step(observation, score.reward, True, outcome, score, ended)
        return self._final

    def _over_wall_time(self) -> bool:
        return time.monotonic() - self._started > self.limits.wall_s


def _write_files(root: Path, spec: RepoSpec) -> None:
    for rel, text in spec.files.items():
        pure = PurePosixPath(rel)
        if not rel or pure.is_absolute() or ".." in pure.parts:
            raise TaskEnvironmentError(f"repository file {rel!r} would land outside the copy")
        target = root.joinpath(*pure.parts)
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode("utf-8"))


def _name(action: ParsedTurn) -> str:
    return "" if action.call is None else action.call.name[:64]


def _arguments_json(call: ToolCall) -> str:
    return json.dumps(dict(call.arguments), separators=(",", ":"), ensure_ascii=False)


def _ms(started: float) -> int:
    return round((time.monotonic() - started) * 1000)
