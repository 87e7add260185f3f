"""The agent warm-up recipe (``flywheel learn --recipe agent-sft``): supervised fine-tuning of the
agent LM on an environment's demonstrations, one run. Config: ``configs/sft.yaml``."""
