"""The reward joiner: telemetry joined per suggestion into Rewards, rollouts into group advantages.

A thin faust adapter (`app.build_app`) over the pure logic in `processors.rewards`; see
`docs/processors.md` for windows, watermark, lateness and guarantees.

Import the pieces from their modules: `processors.joiner.config` (no faust), `.app` (faust).
"""
