"""`flywheel process` with a crash hook, for the targeted crash tests.

Run as a script: ``python tests/processors/joiner/joiner_crash_hook.py MODE REWARDS ARGS...``.
It wraps faust's `TransactionManager.commit` (the exactly_once commit: consumer offsets sent to
and committed with each partition's transaction) and SIGKILLs its own process at the first
commit once the worker has emitted at least REWARDS Rewards:

* ``after``: just after that commit returned (everything the worker handed to faust before it
  must be durable, or it is lost: its source offsets are committed);
* ``before``: just before it starts (the open transactions are aborted; their records must be
  processed again);
* ``term``: SIGTERM instead, just after that commit: the worker must stop cleanly (exit 0);
* ``hold``: no kill; from then on faust's commits are skipped until the next rebalance, so the
  transaction holding those Rewards is still open when partitions are revoked (as it is when a
  rebalance falls between two of faust's periodic commits).

It commits every 50 ms (faust's default is 2.8 s) so a commit lands while a burst of Rewards is
being written, and prints to stderr what was still waiting in faust's producer buffer.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

import faust  # noqa: E402
from faust.transport.consumer import TransactionManager  # noqa: E402

from processors.joiner.stats import JoinerStats  # noqa: E402

MODE, AT_REWARDS = sys.argv[1], int(sys.argv[2])
del sys.argv[1:3]
STATS: list[JoinerStats] = []
APPS: list[Any] = []

_stats_init = JoinerStats.__init__


def _register_stats(self: JoinerStats, *args: Any, **kwargs: Any) -> None:
    _stats_init(self, *args, **kwargs)
    STATS.append(self)


JoinerStats.__init__ = _register_stats  # type: ignore[method-assign]


class _FastCommitApp(faust.App):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, broker_commit_interval=0.05, **kwargs)
        APPS.append(self)


faust.App = _FastCommitApp  # type: ignore[misc]  # build_app reads faust.App when called

_commit = TransactionManager.commit


def _rewards() -> int:
    return sum(s.rewards for s in STATS)


FIRED: list[bool] = []


def _die(when: str) -> None:
    if FIRED:
        return  # SIGTERM: once (the shutdown commits again)
    FIRED.append(True)
    buffered = APPS[0].producer.buffer.size if APPS else -1
    sig = signal.SIGTERM if MODE == "term" else signal.SIGKILL
    print(
        f"crash hook: {sig.name} {when} a commit; {_rewards()} rewards emitted, "
        f"{buffered} records still in faust's producer buffer",
        file=sys.stderr,
        flush=True,
    )
    os.kill(os.getpid(), sig)


HOLDING: list[bool] = []  # hold mode: [True] while commits are skipped, [False] after


async def _commit_then_maybe_die(
    self: Any, offsets: Any, start_new_transaction: bool = True
) -> bool:
    due = _rewards() >= AT_REWARDS
    if MODE == "hold":
        if due and not HOLDING:
            HOLDING.append(True)
            print(f"crash hook: holding commits at {_rewards()} rewards", file=sys.stderr)
        if HOLDING and HOLDING[-1]:
            return False  # not committed: faust keeps the offsets for a later commit
    if due and MODE == "before":
        _die("before")
    done = await _commit(self, offsets, start_new_transaction=start_new_transaction)
    if due and MODE in ("after", "term"):
        _die("after")
    return bool(done)


_on_rebalance = TransactionManager.on_rebalance


async def _on_rebalance_resume(self: Any, *args: Any, **kwargs: Any) -> None:
    if HOLDING and HOLDING[-1]:
        HOLDING.append(False)
        print("crash hook: a rebalance; commits resume", file=sys.stderr, flush=True)
    await _on_rebalance(self, *args, **kwargs)


TransactionManager.commit = _commit_then_maybe_die  # type: ignore[method-assign]
TransactionManager.on_rebalance = _on_rebalance_resume  # type: ignore[method-assign]

from flywheel.commands.process import process  # noqa: E402

process(prog_name="joiner_crash_hook")
