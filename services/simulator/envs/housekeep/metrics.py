"""Housekeep's rearrangement metrics, computed from a house and where its objects are now.

* success rate (as LLM-planner papers on Housekeep report it):
  (objects correctly placed now - correctly placed at the start) / misplaced at the start,
  in percent; negative when the agent misplaces objects that were right.
* object success: the fraction of the relevant objects (misplaced at the start, or touched by
  the agent) that are on a correct receptacle now; a held object is not.
* soft score: the mean, over the same objects, of the fraction of annotators who rated the
  receptacle each object is on positively (0 for a held object).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

from .house import House


@dataclass(frozen=True)
class RearrangementMetrics:
    success_rate: float  # percent, can be negative
    object_success: float  # fraction in [0, 1]
    soft_score: float  # fraction in [0, 1]
    correctly_placed: int
    correct_at_start: int
    misplaced_at_start: int

    def as_dict(self) -> dict[str, float]:
        return {key: float(value) for key, value in asdict(self).items()}


def is_correct(house: House, placement: Sequence[int | None], obj: int) -> bool:
    receptacle = placement[obj]
    return receptacle is not None and bool(house.allowed[receptacle, obj])


def rearrangement_metrics(
    house: House, placement: Sequence[int | None], touched: Iterable[int] = ()
) -> RearrangementMetrics:
    """`placement[o]`: index of the receptacle object o is on now (None while held)."""
    correct_now = sum(is_correct(house, placement, o) for o in range(len(house.objects)))
    correct_at_start = house.correct_at_start()
    misplaced = len(house.objects) - correct_at_start
    success = 100.0 * (correct_now - correct_at_start) / misplaced if misplaced else 0.0
    relevant = set(house.misplaced_objects()) | set(touched)
    if relevant:
        object_success = sum(is_correct(house, placement, o) for o in relevant) / len(relevant)
        soft = [
            0.0 if placement[o] is None else float(house.soft[placement[o], o]) for o in relevant
        ]
        soft_score = sum(soft) / len(relevant)
    else:
        object_success = soft_score = 0.0
    return RearrangementMetrics(
        success_rate=success,
        object_success=object_success,
        soft_score=soft_score,
        correctly_placed=correct_now,
        correct_at_start=correct_at_start,
        misplaced_at_start=misplaced,
    )
