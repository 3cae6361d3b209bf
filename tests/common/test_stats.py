"""llmrl.common.stats: mean, 95% bootstrap interval and IQM over seeds, as scipy computes them."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from llmrl.common import stats

VALUES = [0.1, 0.5, 0.2, 0.9, 0.4, 0.7, 0.3, 0.8]


def scipy_interval(values: list[float]) -> tuple[float, float]:
    """The interval computed directly, with the arguments the module documents."""
    result = scipy_stats.bootstrap(
        (np.array(values),),
        np.mean,
        confidence_level=0.95,
        n_resamples=9999,
        method="percentile",
        rng=0,
    )
    return result.confidence_interval.low, result.confidence_interval.high


def test_mean_interval_and_iqm_equal_a_direct_computation():
    estimate = stats.estimate(VALUES)
    assert estimate.n == 8
    assert estimate.mean == pytest.approx(sum(VALUES) / 8)  # 3.9 / 8
    # sorted: 0.1 0.2 | 0.3 0.4 0.5 0.7 | 0.8 0.9: the IQM is the mean of the middle half
    assert estimate.iqm == pytest.approx((0.3 + 0.4 + 0.5 + 0.7) / 4)
    assert estimate.iqm == pytest.approx(scipy_stats.trim_mean(VALUES, 0.25))
    low, high = scipy_interval(VALUES)
    assert (estimate.low, estimate.high) == (pytest.approx(low), pytest.approx(high))
    assert estimate.low < estimate.mean < estimate.high
    assert estimate.note == ""


def test_the_interval_is_reproducible():
    assert stats.bootstrap_interval(VALUES) == stats.bootstrap_interval(list(VALUES))


def test_one_seed_gives_the_point_and_says_so():
    estimate = stats.estimate([0.75])
    assert (estimate.mean, estimate.low, estimate.high, estimate.iqm) == (0.75,) * 4
    assert estimate.note == stats.ONE_VALUE_NOTE
    assert estimate.format() == "0.75"


def test_missing_values_are_left_out():
    estimate = stats.estimate([1.0, None, math.nan, 3.0, math.inf])
    assert estimate.n == 2 and estimate.mean == 2.0
    assert stats.estimate([None]).note == "no values"
    assert math.isnan(stats.estimate([]).mean)
    assert stats.estimate([]).format() == "n/a"


def test_equal_values_give_a_point_interval():
    estimate = stats.estimate([2.0, 2.0, 2.0])
    assert (estimate.low, estimate.high) == (2.0, 2.0)
    assert estimate.format() == "2 [2, 2]"


def test_curve_band_is_the_vectorised_bootstrap_of_each_point():
    curves = np.array([[0.0, 1.0, 2.0, 5.0], [1.0, 1.0, 4.0, 5.0], [2.0, 1.0, 9.0, 5.0]])
    centre, low, high = stats.curve_band(curves)
    assert centre == pytest.approx(curves.mean(axis=0))
    direct = scipy_stats.bootstrap(
        (curves,), np.mean, axis=0, confidence_level=0.95, method="percentile", rng=0
    )
    varying = [0, 2]  # columns 1 and 3 are equal over seeds: their band is the point
    assert low[varying] == pytest.approx(direct.confidence_interval.low[varying])
    assert high[varying] == pytest.approx(direct.confidence_interval.high[varying])
    assert (low[[1, 3]] == [1.0, 5.0]).all() and (high[[1, 3]] == [1.0, 5.0]).all()
    one, one_low, one_high = stats.curve_band(curves[:1])
    assert (one == curves[0]).all() and (one_low == one).all() and (one_high == one).all()
    with pytest.raises(ValueError, match="seeds, points"):
        stats.curve_band(np.zeros(3))
