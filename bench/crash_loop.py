"""The crash check, repeated: `bench.pipeline --crash` run `--runs` times (alternating 1 and 2
joiner workers unless `--workers` is given), each against its own crash-free run, with a tally.

Every run must pass (Rewards equal to the crash-free run's by id *and* value, none committed
twice, the lake exactly once); a failing run's logs are kept and named. Needs the dev stack.

    .venv/bin/python -m bench.crash_loop --runs 20 --events 100000
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--kills", type=int, default=4, help="per run (joiner and sink in turn)")
    parser.add_argument("--workers", type=int, default=0, help="0: alternate 1 and 2")
    args = parser.parse_args()
    console = Console()
    table = Table("run", "workers", "kills", "rewards", "result", "minutes", "logs")
    failed = 0
    for run in range(1, args.runs + 1):
        workers = args.workers or (1 if run % 2 else 2)
        kills = args.kills if workers == 1 else args.kills + 2
        cmd = [
            sys.executable, "-m", "bench.pipeline", "--events", str(args.events), "--crash",
            "--kills", str(kills), "--workers", str(workers),
        ]  # fmt: skip
        started = time.monotonic()
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        minutes = (time.monotonic() - started) / 60
        out = done.stdout + done.stderr
        logs = re.search(r"logs and lakes under (\S+)", out)
        compared = re.search(r"rewards equal to crash-free\s*.*?\(([\d,]+ vs [\d,]+)\)", out)
        ok = done.returncode == 0
        failed += not ok
        kept = ""
        if logs is not None:
            if ok:
                shutil.rmtree(logs.group(1), ignore_errors=True)  # lakes take room
            else:
                kept = logs.group(1)
                Path(kept, "bench.out").write_text(out)
        table.add_row(
            str(run), str(workers), str(kills), compared.group(1) if compared else "?",
            "ok" if ok else "[red]FAIL", f"{minutes:.1f}", kept,
        )  # fmt: skip
        console.print(
            f"run {run}/{args.runs} ({workers} worker(s), {kills} kills): "
            f"{'ok' if ok else 'FAIL'} in {minutes:.1f} min; {run - failed} of {run} passed"
        )
        if not ok:
            console.print(out[-2000:], markup=False, highlight=False)
    console.print(table)
    console.print(f"{args.runs - failed} of {args.runs} crash runs passed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
