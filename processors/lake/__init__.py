"""The lake sink: every platform topic into hour-partitioned Parquet, exactly once (DESIGN §6).

See `docs/lake.md` for the layout, guarantees, dead letters and how to query the lake.
"""

from processors.lake.buffers import RotationLimits
from processors.lake.sink import DEFAULT_GROUP, LakeSink
from processors.lake.status import SinkStatus

__all__ = ["DEFAULT_GROUP", "LakeSink", "RotationLimits", "SinkStatus"]
