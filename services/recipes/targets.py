"""A recipe's claims as code: verdicts over one config's results, aggregated over seeds.

A recipe states what it holds its results to as `Recipe.targets(results)`. The experiment
report (`llmrl sweep`, `llmrl compare`, an orchestrator's experiment) calls it once per config
(a grid point, its seeds together) and prints the verdicts beside the tables; nothing else in
the project decides whether a target is met.

    def targets(self, results: ConfigResults) -> list[Verdict]:
        gain = results.paired("success_%", {"method": "learned"}, {"method": "always"})
        return [judge("learned over always-ask (success, points)", gain, ">=", 5,
                      paper="+34 points, Hu et al. 2023 Fig. 4")]

A verdict holds the measured value (the mean of a sample, with its 95% bootstrap interval),
the threshold it is held to, whether the mean is past it (`met`) and whether the whole
interval is (`beyond_noise`: as far as this sample can tell, the figure would hold again on
new seeds), and the paper's figure beside it. Both compare the figures as the report prints
them (`DISPLAY_DIGITS` significant digits), so a verdict never contradicts its own figure
(0.6 - 0.4 = 0.19999999999999996 is printed 0.2 and meets ">= 0.2").

A sample is one value per seed (a difference taken within each seed: paired), or, where a
recipe reports per-episode values that every method played alike (`Results.samples`), one
value per episode: its difference between the two methods, averaged over the seeds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from llmrl.common import stats

Direction = Literal[">=", ">", "<=", "<"]
DISPLAY_DIGITS = 3  # significant digits of every figure a report prints, and verdicts compare
# The fewest values whose interval a verdict reads as noise. Two values' percentile bootstrap
# interval is just their range, which holds the middle of what new seeds would give only half
# of the time (both values fall on one side of it as often as not): calling a figure beyond
# noise on it would overclaim. Three is the fewest seeds a claim is stated over.
MIN_VALUES_FOR_NOISE = 3


@dataclass(frozen=True)
class Sample:
    """Values a verdict is judged on, and what one value is (`basis`)."""

    values: list[float]
    basis: str

    @property
    def estimate(self) -> stats.Estimate:
        return stats.estimate(self.values)


@dataclass(frozen=True)
class Verdict:
    """One target judged: the measured mean and interval against a threshold."""

    target: str
    mean: float | None
    low: float | None
    high: float | None
    n: int
    direction: Direction
    threshold: float
    basis: str
    paper: str | None = None
    config: str = ""  # the config (grid point) it was judged on, set by the report

    @property
    def met(self) -> bool | None:
        """Whether the mean is past the threshold (None: nothing measured)."""
        return None if self.mean is None else _past(self.mean, self.direction, self.threshold)

    @property
    def beyond_noise(self) -> bool | None:
        """Whether the whole 95% interval is past the threshold (None: fewer than
        `MIN_VALUES_FOR_NOISE` values)."""
        return self._interval_bound_past(near=True)

    @property
    def missed_beyond_noise(self) -> bool | None:
        """Whether the whole 95% interval misses the threshold (None: fewer than
        `MIN_VALUES_FOR_NOISE` values): a miss is reported with its noise as a hit is, so one
        seed's miss reads as no more than that."""
        far_past = self._interval_bound_past(near=False)
        return None if far_past is None else not far_past

    def _interval_bound_past(self, near: bool) -> bool | None:
        """Whether the interval's bound nearer the threshold's wrong side (`near`, its low end
        for a floor) or its other bound is past the threshold; None below
        `MIN_VALUES_FOR_NOISE` values."""
        if self.n < MIN_VALUES_FOR_NOISE or self.low is None or self.high is None:
            return None
        floor = self.direction in (">=", ">")
        bound = self.low if floor == near else self.high
        return _past(bound, self.direction, self.threshold)

    @property
    def status(self) -> str:
        if self.met is None:
            return "not measured"
        too_few = "one value" if self.n == 1 else f"{self.n} values"
        noise = {True: "beyond noise", False: "within noise", None: f"{too_few}: noise unknown"}
        if not self.met:
            return f"not met, {noise[self.missed_beyond_noise]}"
        return f"met, {noise[self.beyond_noise]}"

    def measured(self) -> str:
        if self.mean is None:
            return "n/a"
        # below the values noise is read from, the "interval" is only the values' range: the
        # mean alone, as the status says (the basis names how many values it is over)
        if self.n < MIN_VALUES_FOR_NOISE or self.low is None or self.high is None:
            return _number(self.mean)
        return f"{_number(self.mean)} [{_number(self.low)}, {_number(self.high)}]"

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "target": self.target,
            "mean": self.mean,
            "low": self.low,
            "high": self.high,
            "n": self.n,
            "direction": self.direction,
            "threshold": self.threshold,
            "basis": self.basis,
            "paper": self.paper,
            "met": self.met,
            "beyond_noise": self.beyond_noise,
            "missed_beyond_noise": self.missed_beyond_noise,
            "status": self.status,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Verdict:
        keys = ("target", "mean", "low", "high", "n", "direction", "threshold", "basis")
        return cls(
            **{key: data[key] for key in keys},
            paper=data.get("paper"),
            config=data.get("config", ""),
        )


def judge(
    target: str,
    sample: Sample | None,
    direction: Direction,
    threshold: float,
    paper: str | None = None,
) -> Verdict:
    """The verdict on `sample` (None or empty: not measured) against `threshold`."""
    if sample is None or not stats.finite_values(sample.values).size:
        basis = sample.basis if sample is not None else "nothing to compare"
        return Verdict(target, None, None, None, 0, direction, threshold, basis, paper)
    est = sample.estimate
    return Verdict(
        target, est.mean, est.low, est.high, est.n, direction, threshold, sample.basis, paper
    )


def _past(value: float, direction: Direction, threshold: float) -> bool:
    """Whether `value`, as printed, lies past `threshold`, as printed: float noise below the
    printed digits (a difference of means) never flips a verdict against its figure."""
    shown, bar = displayed(value), displayed(threshold)
    return {
        ">=": shown >= bar,
        ">": shown > bar,
        "<=": shown <= bar,
        "<": shown < bar,
    }[direction]


def displayed(value: float) -> float:
    """`value` rounded to the digits a report prints it with."""
    return float(_number(value)) if math.isfinite(value) else value


def _number(value: float) -> str:
    return f"{value:.{DISPLAY_DIGITS}g}" if math.isfinite(value) else "n/a"


@dataclass
class Row:
    """One row of a recipe's table over seeds: its key columns and every column's values."""

    key: dict[str, Any]
    seeds: list[Any]
    values: dict[str, list[Any]]

    def by_seed(self, column: str) -> dict[Any, float]:
        return {
            seed: float(value)
            for seed, value in zip(self.seeds, self.values.get(column, []), strict=False)
            if isinstance(value, int | float) and math.isfinite(float(value))
        }


@dataclass
class ConfigResults:
    """What `Recipe.targets` reads: one config's table rows over its seeds, and the runs'
    per-unit samples (`Results.samples`: name → one list per seed)."""

    config: str
    rows: list[Row]
    samples: dict[str, dict[Any, list[float]]] = field(default_factory=dict)

    def row(self, **key: Any) -> Row | None:
        """The row whose key columns hold these values (the first, if several)."""
        for row in self.rows:
            if all(row.key.get(k) == v for k, v in key.items()):
                return row
        return None

    def values(self, column: str, key: Mapping[str, Any]) -> dict[Any, float]:
        row = self.row(**key)
        return row.by_seed(column) if row is not None else {}

    def mean(self, column: str, key: Mapping[str, Any]) -> float:
        return stats.mean(self.values(column, key).values())

    def sample(self, column: str, key: Mapping[str, Any]) -> Sample | None:
        """One row's `column`, one value per seed (None when the row is missing)."""
        values = self.values(column, key)
        return Sample(list(values.values()), f"{len(values)} seed(s)") if values else None

    def paired(
        self,
        column: str,
        later: Mapping[str, Any],
        earlier: Mapping[str, Any],
        earlier_column: str | None = None,
        ratio: bool = False,
    ) -> Sample | None:
        """later − earlier (or later / earlier) within each seed both rows have; None when a
        row is missing."""
        a = self.values(column, later)
        b = self.values(earlier_column or column, earlier)
        seeds = [seed for seed in a if seed in b]
        if not seeds:
            return None
        if ratio:
            values = [a[s] / b[s] if b[s] else math.nan for s in seeds]
        else:
            values = [a[s] - b[s] for s in seeds]
        return Sample(values, f"{len(seeds)} seed(s), paired within each seed")

    def paired_samples(self, later: str, earlier: str) -> Sample | None:
        """later − earlier unit by unit (e.g. the same evaluation episode under two stages),
        each unit's difference averaged over the seeds, so that a unit every seed plays again
        counts once (a cluster of its seeds) and the interval is over units; None when either
        sample is missing or the seeds' units differ in number."""
        a, b = self.samples.get(later, {}), self.samples.get(earlier, {})
        seeds = [seed for seed in a if seed in b and len(a[seed]) == len(b[seed])]
        if not seeds or len({len(a[seed]) for seed in seeds}) != 1:
            return None
        matrix = np.array([np.subtract(a[seed], b[seed]) for seed in seeds], dtype=float)
        values = matrix.mean(axis=0).tolist()
        return Sample(
            values, f"{len(values)} paired episodes, each averaged over {len(seeds)} seed(s)"
        )


def best_of(results: ConfigResults, column: str, keys: Sequence[Mapping[str, Any]]) -> dict:
    """Of the rows named by `keys`, the key of the one with the highest mean `column`."""
    present = [k for k in keys if results.row(**k) is not None]
    return dict(max(present, key=lambda k: results.mean(column, k))) if present else {}


def verdicts_markdown(verdicts: Sequence[Mapping[str, Any]]) -> list[str]:
    """The report's targets table (verdicts as stored in results.json)."""
    if not verdicts:
        return []
    lines = [
        "| config | target | measured: mean [95% CI] | held to | verdict | basis | paper |",
        "|---|---|---|---|---|---|---|",
    ]
    for data in verdicts:
        verdict = Verdict.from_dict(data)
        lines.append(
            f"| {verdict.config} | {verdict.target} | {verdict.measured()} | "
            f"{verdict.direction} {_number(verdict.threshold)} | {verdict.status} | "
            f"{verdict.basis} | {verdict.paper or ''} |"
        )
    return lines
