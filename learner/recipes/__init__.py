"""Learner recipes: one folder per way of training a model, with its own code and YAML configs.

``gate/`` trains the suggestion-gate network from reward rows; ``agent_sft/`` warms the agent LM
up on demonstrations; ``agent_rl/`` trains it with GRPO on trials and served completions. A
recipe's defaults are in its ``configs/`` folder; what recipes share (the engine, the data
windows, the eval suite) lives in ``learner/`` above them.
"""
