"""Market data, a batched trading environment on the device, and the device experience collector.

See :mod:`tritonrl.toolkit.market.data` (bars, features, the one upload cast, splits by time).
"""
