"""What the learner and the inference fleet both need and neither owns: the context spec a
suggestion-gate policy sees (`policies.context`), the `Policy` Protocol with version 0, the
heuristic (`policies.policy`), and the learned gate network with its artifact files
(`policies.gate_net`); the agent's language model (`policies.agent_lm`, `agent_chat`,
`agent_sampling`), and the lock every transformers model build holds (`policies.model_build`)."""
