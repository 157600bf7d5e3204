"""The forecaster report as text: :func:`format_report` of the report :func:`~tritonrl.toolkit.forecast.fit`
returns (``tritonrl fit`` prints it). See docs/pages/forecasting.md."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["format_report"]


def format_report(report: Mapping[str, Any], split: str = "test") -> str:
    """The report's ``split`` as a table: MSE, MAE (normalised units) and directional accuracy of
    the model and each baseline; with a horizon of more than one step, a second table of their
    MSE and MAE at the steps of ``report["horizons"]`` (also in the original units where the
    report has them)."""
    rows, norm = report[split], report["normalizer"]
    if "series" in norm:  # SeriesWindows: per series and column; MAE also in the file's units
        scaling = f"each of {len(norm['series'])} series normalised by its own train split"
    else:
        scaling = f"normalised by the train split (mean {norm['mean']:.4g}, std {norm['std']:.4g})"
    units = all("mae_original" in m for m in rows.values())
    fitted = " (fitted as a change)" if report.get("target_mode") == "change" else ""
    lines = [
        f"{split} windows, target {report['target']}{fitted} {scaling}: MSE 1 = its variance",
        f"{'forecast':<22} {'MSE':>9} {'MAE':>9} {'direction':>9}" + (f" {'MAE units':>11}" if units else ""),
    ]
    for name, m in rows.items():
        label = f"{name} (s={report['season']})" if name == "seasonal_naive" else name
        extra = f" {m['mae_original']:>11.4g}" if units else ""
        lines.append(f"{label:<22} {m['mse']:>9.4f} {m['mae']:>9.4f} {m['direction']:>9.3f}{extra}")
    return "\n".join(lines + _horizon_table(report, split))


_UNITS = (("mse", "MSE"), ("mae", "MAE"), ("mse_original", "MSE units"), ("mae_original", "MAE units"))


def _horizon_table(report: Mapping[str, Any], split: str) -> list[str]:
    """The lines of the per-horizon-step table of ``split`` (none for a report without one, or of a
    single step): for each forecast its MSE and MAE (normalised; 4 decimals) and, where the report
    has them, in the original units (4 significant digits), at each step of ``horizons.steps``."""
    horizons = report.get("horizons")
    if not horizons or len(horizons["steps"]) < 2 or split not in horizons:
        return []
    lines = [
        f"{split} errors by horizon step (MSE, MAE normalised; units: the file's)",
        f"{'forecast':<22} {'metric':<10}" + "".join(f" {f'h={h}':>10}" for h in horizons["steps"]),
    ]
    for name, by_step in horizons[split].items():
        label = f"{name} (s={report['season']})" if name == "seasonal_naive" else name
        for key, title in _UNITS:
            if key in by_step:
                digits = ".4f" if key in ("mse", "mae") else ".4g"
                cells = "".join(f" {v:>10{digits}}" for v in by_step[key])
                lines.append(f"{label:<22} {title:<10}{cells}")
                label = ""
    return lines
