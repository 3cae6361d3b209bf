"""evaluation/llm_personalize.py checks the issue's ladder on the round the run has."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "evaluation" / "llm_personalize.py"


def script():
    spec = importlib.util.spec_from_file_location("llm_personalize_evaluation", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def row(episodes: str, zero_shot: float, bootstrap: float, **rounds: float) -> dict:
    named = {name.replace("_", " "): value for name, value in rounds.items()}
    return {"scene": "all", "episodes": episodes, "zero-shot": zero_shot,
            "bootstrap": bootstrap, **named}  # fmt: skip


def test_one_round_is_compared_as_round_1_and_two_as_round_2():
    evaluation = script()
    assert evaluation.compared_round(0) is None
    assert evaluation.compared_round(1) == "round 1"
    assert evaluation.compared_round(3) == "round 2"
    one = [row("held-out", -5.0, 0.0, round_1=2.0)]
    assert evaluation.held_out_ladder(one, 1) is True
    assert evaluation.verdicts(one, 1) == {
        "held-out": {"bootstrap > zero-shot": True, "round 1 >= bootstrap": True}
    }
    two = [row("held-out", -5.0, 0.0, round_1=2.0, round_2=0.0)]
    assert evaluation.held_out_ladder(two, 2) is False  # round 2 = bootstrap: not above it
    assert evaluation.held_out_ladder(two, 0) is None


def test_without_rounds_only_bootstrap_against_zero_shot_is_checked():
    evaluation = script()
    rows = [row("held-out", -2.8, -3.6)]
    assert evaluation.verdicts(rows, 0) == {"held-out": {"bootstrap > zero-shot": False}}


def test_the_target_is_the_held_out_ladder_at_round_2_and_unchecked_before():
    evaluation = script()
    # bootstrap above zero-shot on every split is not the target without round 2
    rows = [row("train", -2.2, -1.9), row("held-out", -4.7, -1.4)]
    assert evaluation.target_met(rows, 0) is None
    one = [row("held-out", -4.7, -1.4, round_1=0.0)]
    assert evaluation.target_met(one, 1) is None
    assert evaluation.target_line(None).startswith("not checked")
    met = [row("train", 0.0, -1.0, round_1=-2.0, round_2=-3.0),
           row("held-out", -4.7, -1.4, round_1=0.0, round_2=1.0)]  # fmt: skip
    assert evaluation.target_met(met, 2) is True
    missed = [row("held-out", -4.7, -1.4, round_1=0.0, round_2=-1.4)]
    assert evaluation.target_met(missed, 2) is False


def test_the_ladder_is_measured_step_by_step_and_round_2_against_bootstrap():
    evaluation = script()
    assert evaluation.ladder_comparisons(0) == [("bootstrap", "zero-shot")]
    assert evaluation.ladder_comparisons(2) == [
        ("bootstrap", "zero-shot"),
        ("round 1", "bootstrap"),
        ("round 2", "round 1"),
        ("round 2", "bootstrap"),
    ]
    one_round = [("bootstrap", "zero-shot"), ("round 1", "bootstrap")]
    assert evaluation.ladder_comparisons(1) == one_round


def difference(comparison: str, mean: float, beyond: bool, split: str = "held-out") -> dict:
    return {"episodes": split, "comparison": comparison, "mean": mean, "beyond_noise": beyond}


def test_beyond_noise_needs_both_held_out_steps_of_the_target_above_zero():
    evaluation = script()
    both = [difference("bootstrap - zero-shot", 3.0, True),
            difference("round 2 - bootstrap", 1.0, True),
            difference("round 2 - bootstrap", -9.0, False, split="train")]  # fmt: skip
    assert evaluation.target_beyond_noise(both, 2) is True
    assert evaluation.target_beyond_noise(both, 1) is None  # no round 2: not checked
    within = [both[0], difference("round 2 - bootstrap", 0.7, False)]
    assert evaluation.target_beyond_noise(within, 2) is False
    a_loss = [both[0], difference("round 2 - bootstrap", -4.0, True)]  # beyond noise, downwards
    assert evaluation.target_beyond_noise(a_loss, 2) is False
    assert evaluation.target_beyond_noise(both[:1], 2) is None  # round 2 not evaluated
