"""Stream processors: reward functions and attribution as pure functions (`processors.rewards`),
the faust reward joiner and rollout rewarder (`processors.joiner`), and the exactly-once Parquet
lake sink with its dead letters and erasure (`processors.lake`)."""
