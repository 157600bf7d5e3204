"""Forecasting: windows over uploaded bars or any CSV time series, baselines, and the trainer ``fit``.

Forecasters are networks ([`tritonrl.agents.forecast`][tritonrl.agents.forecast]); this package trains any of
them. May import the toolkit's core modules, ``bars`` and ``kernels``; never ``envs``, ``training``,
``cli`` or ``agents``. See docs/pages/forecasting.md.
"""

from tritonrl.toolkit.forecast.baselines import (
    BASELINES,
    baselines,
    baselines_by_step,
    evaluate,
    evaluate_by_step,
    horizon_steps,
)
from tritonrl.toolkit.forecast.report import format_report
from tritonrl.toolkit.forecast.series import (
    SeriesNormalizer,
    SeriesTable,
    SeriesWindows,
    is_market_csv,
    load_series,
    read_header,
    series_windows,
)
from tritonrl.toolkit.forecast.synthetic import (
    SYNTHETIC_KINDS,
    parse_synthetic_spec,
    synthetic_series,
    synthetic_values,
)
from tritonrl.toolkit.forecast.trainer import (
    CHECKPOINT_NAME,
    FIT_FORMAT,
    REPORT_NAME,
    SCHEDULES,
    FitConfig,
    FitError,
    fit,
    lr_at,
)
from tritonrl.toolkit.forecast.windows import (
    CHANGE_TARGETS,
    TARGET_MODES,
    Normalizer,
    WindowData,
    check_length,
    load_windows,
    market_inputs,
    resolve_target_mode,
    target_series,
)

__all__ = [
    "BASELINES",
    "CHANGE_TARGETS",
    "CHECKPOINT_NAME",
    "FIT_FORMAT",
    "REPORT_NAME",
    "SCHEDULES",
    "SYNTHETIC_KINDS",
    "FitConfig",
    "FitError",
    "Normalizer",
    "SeriesNormalizer",
    "SeriesTable",
    "SeriesWindows",
    "TARGET_MODES",
    "WindowData",
    "baselines",
    "baselines_by_step",
    "check_length",
    "evaluate",
    "evaluate_by_step",
    "fit",
    "format_report",
    "horizon_steps",
    "is_market_csv",
    "load_series",
    "load_windows",
    "lr_at",
    "market_inputs",
    "parse_synthetic_spec",
    "read_header",
    "resolve_target_mode",
    "series_windows",
    "synthetic_series",
    "synthetic_values",
    "target_series",
]
