"""The continuous learner: lake → MDS windows → training → off-policy gate → model versions."""
