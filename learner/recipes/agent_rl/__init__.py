"""The agent RL recipe (``flywheel learn --recipe agent``): trials and served completions from the
lake → token windows → GRPO → versions released by the eval suite. Config: ``configs/rl.yaml``."""
