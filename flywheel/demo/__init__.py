"""The closed-loop demo: the platform's workers, the simulated fleet and the learner together."""
