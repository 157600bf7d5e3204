"""Market data, a batched trading environment on the device, and the device experience collector.

See :mod:`tritonrl.toolkit.market.data` (bars, features, the one upload cast, splits by time).
"""

from tritonrl.toolkit.market.anytrading import ANYTRADING_WINDOW as ANYTRADING_WINDOW
from tritonrl.toolkit.market.anytrading import AnyTradingEnv as AnyTradingEnv
from tritonrl.toolkit.market.anytrading import process_data as process_data
