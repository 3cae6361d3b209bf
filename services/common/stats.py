"""Statistics over seeds: the mean, its 95% bootstrap interval and the interquartile mean.

How methods are reported over a handful of seeds (Agarwal et al. 2021, "Deep RL at the edge
of the statistical precipice"): a point estimate with a bootstrap interval, and the IQM,
which is robust to one outlying seed. The resampling is scipy's (`scipy.stats.bootstrap`,
percentile method) with a fixed seed, so the same values always give the same report.

    >>> estimate([0.8, 0.9, 1.0]).format()
    '0.9 [0.8, 1]'

Non-finite values (a metric a run could not compute) are left out of the sample. One value
gives an interval equal to the point (there is nothing to resample), and `Estimate.note`
says so.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import stats as scipy_stats

CONFIDENCE = 0.95
RESAMPLES = 9999
RANDOM_STATE = 0  # fixed: a report built twice from the same runs is the same report
IQM_TRIM = 0.25  # trim_mean(x, 0.25): the mean of the middle 50%
ONE_VALUE_NOTE = "one seed: the interval is the point"


@dataclass(frozen=True)
class Estimate:
    """A metric over seeds: how many values, their mean, its interval, and their IQM."""

    n: int
    mean: float
    low: float
    high: float
    iqm: float
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def format(self, digits: int = 4) -> str:
        """ "mean [low, high]" (just the mean with one value, "n/a" with none)."""
        if self.n == 0:
            return "n/a"
        mean = _short(self.mean, digits)
        if self.n == 1:
            return mean
        return f"{mean} [{_short(self.low, digits)}, {_short(self.high, digits)}]"


def _short(value: float, digits: int) -> str:
    return f"{value:.{digits}g}"


def finite_values(values: Iterable[Any]) -> np.ndarray:
    """The sample as floats, without None, NaN and infinities."""
    floats = [float(v) for v in values if v is not None and not isinstance(v, str)]
    array = np.asarray(floats, dtype=float)
    return array[np.isfinite(array)]


def mean(values: Iterable[Any]) -> float:
    sample = finite_values(values)
    return float(sample.mean()) if sample.size else math.nan


def iqm(values: Iterable[Any]) -> float:
    """The interquartile mean: scipy's trim_mean with a quarter cut off each end."""
    sample = finite_values(values)
    return float(scipy_stats.trim_mean(sample, IQM_TRIM)) if sample.size else math.nan


def bootstrap_interval(
    values: Iterable[Any],
    confidence: float = CONFIDENCE,
    n_resamples: int = RESAMPLES,
    random_state: int = RANDOM_STATE,
) -> tuple[float, float]:
    """The percentile bootstrap interval of the mean (the point itself for one value)."""
    sample = finite_values(values)
    if sample.size == 0:
        return (math.nan, math.nan)
    if sample.size == 1 or np.all(sample == sample[0]):  # nothing to resample
        return (float(sample[0]), float(sample[0]))
    result = scipy_stats.bootstrap(
        (sample,),
        np.mean,
        confidence_level=confidence,
        n_resamples=n_resamples,
        method="percentile",
        rng=random_state,
    )
    return (float(result.confidence_interval.low), float(result.confidence_interval.high))


def estimate(values: Iterable[Any], confidence: float = CONFIDENCE) -> Estimate:
    """Mean, bootstrap interval and IQM of a sample (one value per seed)."""
    sample = finite_values(values)
    low, high = bootstrap_interval(sample, confidence)
    note = ONE_VALUE_NOTE if sample.size == 1 else ("no values" if sample.size == 0 else "")
    return Estimate(
        n=int(sample.size),
        mean=mean(sample),
        low=low,
        high=high,
        iqm=iqm(sample),
        note=note,
    )


def curve_band(
    matrix: np.ndarray,
    confidence: float = CONFIDENCE,
    n_resamples: int = RESAMPLES,
    random_state: int = RANDOM_STATE,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean and bootstrap interval at each point of curves (rows: seeds, columns: x).

    One bootstrap over all columns at once (vectorised); with one row the band is the curve.
    """
    matrix = np.asarray(matrix, dtype=float)
    if matrix.ndim != 2 or matrix.shape[0] == 0:
        raise ValueError(f"curves must be a (seeds, points) matrix, got shape {matrix.shape}")
    centre = matrix.mean(axis=0)
    if matrix.shape[0] == 1:
        return centre, centre.copy(), centre.copy()
    result = scipy_stats.bootstrap(
        (matrix,),
        np.mean,
        axis=0,
        confidence_level=confidence,
        n_resamples=n_resamples,
        method="percentile",
        rng=random_state,
    )
    low = np.asarray(result.confidence_interval.low, dtype=float)
    high = np.asarray(result.confidence_interval.high, dtype=float)
    flat = np.all(matrix == matrix[0], axis=0)  # every seed equal: no spread to resample
    low[flat], high[flat] = centre[flat], centre[flat]
    return centre, low, high
