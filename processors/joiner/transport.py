"""faust's aiokafka transport, with changelog highwaters asked of the broker.

Under exactly_once, faust's table recovery takes each changelog partition's highwater from
aiokafka's `last_stable_offset`, which is only known once this consumer has fetched from that
partition. A partition it has not fetched yet (typically one taken over from another worker in
a rebalance) reads -1, so recovery either skips it, leaving its state empty while the source
offsets move on (Rewards lost, others emitted twice), or, with an offset kept from the previous
generation, stops the worker with a `ConsistencyError`. A two-worker crash run
(`python -m bench.pipeline --crash --workers 2`) hit both. `ListOffsets` under read_committed
(aiokafka's `end_offsets`, the consumer's isolation level) returns the last stable offset from
the broker whatever this consumer has fetched.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import faust
from faust.transport.drivers import aiokafka as driver
from faust.types import TP


class _ConsumerThread(driver.AIOKafkaConsumerThread):
    async def _highwaters(self, partitions: list[TP]) -> Mapping[TP, int]:
        consumer: Any = self._ensure_consumer()
        offsets: Mapping[TP, int] = await consumer.end_offsets(partitions)
        return offsets


class _Consumer(driver.Consumer):
    def _new_consumer_thread(self) -> driver.AIOKafkaConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)


class _Transport(driver.Transport):
    Consumer = _Consumer


def use_broker_highwaters(app: faust.App) -> None:
    """Give `app` the transport above; call before the app's first topic (it creates the
    consumer transport)."""
    app.transport = _Transport(app.conf.broker_consumer, app)
