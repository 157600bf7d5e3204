"""Market data, a batched trading environment on the device, and the device experience collector.

See :mod:`tritonrl.toolkit.market.data` (bars, features, the one upload cast, splits by time).
"""

from tritonrl.toolkit.market.env import MarketEnv as MarketEnv
from tritonrl.toolkit.market.env import MarketEnvConfig as MarketEnvConfig
