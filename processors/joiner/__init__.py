"""The reward joiner: telemetry joined per suggestion into Rewards, rollouts into group advantages.

A thin faust adapter (`app.build_app`) over the pure logic in `processors.rewards`; see
`docs/processors.md` for windows, watermark, lateness and guarantees.
"""

from processors.joiner.app import JoinerConfig, build_app
from processors.joiner.stats import JoinerStats

__all__ = ["JoinerConfig", "JoinerStats", "build_app"]
