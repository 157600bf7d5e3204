"""The forecaster report as text: `format_report` of the report `fit`
returns (``tritonrl fit`` prints it). See docs/pages/forecasting.md."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["format_report"]


def format_report(report: Mapping[str, Any], split: str = "test") -> str:
    """The report's ``split`` as a table of MSE, MAE and directional accuracy of the model and each
    baseline, and a table by horizon step when the horizon is longer than one."""
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
    """The lines of the per-horizon-step table of ``split`` (none without one, or for one step)."""
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
