"""The learner benchmark of issue 6: MDS conversion, then CPU (or GPU) training throughput.

Runs the two focused benchmarks one after the other, each reporting against its own baseline
measured in the same run:

* ``bench/learner_mds.py``: ``build_window`` rows/s vs a bare read → pack → ``MDSWriter``
  pipeline and vs ``MDSWriter`` alone (target >= 0.5x);
* ``bench/learner_train.py``: the gate recipe's Trainer rows/s over an MDS window, with the
  in-memory and the streaming loader, vs a plain in-memory tensor loop (target >= 0.8x).

    .venv/bin/python -m bench.learner [--rows 200000]

Run the bench scripts as modules (``python -m bench.<name>`` from the repository root): as files,
``bench/`` would come first on ``sys.path`` and this file would shadow the ``learner`` package.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000, help="reward rows to convert")
    parser.add_argument("--steps", type=int, default=150, help="training steps")
    args = parser.parse_args()
    runs = [
        ["bench.learner_mds", "--rows", str(args.rows), "--rounds", "3"],
        ["bench.learner_train", "--steps", str(args.steps)],
    ]
    for module, *options in runs:
        print(f"== {module}", flush=True)
        subprocess.run([sys.executable, "-m", module, *options], check=True, cwd=HERE.parent)


if __name__ == "__main__":
    main()
