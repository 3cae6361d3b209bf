"""Imagined rollouts (`llmrl.recipes.kalm.imagine`): a grounded tiny LM writes rollouts step by
step, the CLEVR-Robot validity check filters out the ones with impossible states, and the
goal-match rate uses the env's success function."""

from __future__ import annotations

import numpy as np
import pytest

from llmrl.recipes.kalm.grounded_lm import GroundedLM, GroundingSpec
from llmrl.recipes.kalm.imagine import (
    Rollout,
    filter_rollouts,
    goal_match_rate,
    imagine,
    parse_text_rollout,
    reaches_goal,
    select_rollouts,
)
from llmrl.simulator.envs.clevr_robot import GOALS, random_state, success, valid_state

pytest.importorskip("torch")


def test_filtering_rejects_invalid_imagined_states():
    rng = np.random.default_rng(0)
    good = np.stack([random_state(rng) for _ in range(3)]).astype(np.float32)
    off_table = good.copy()
    off_table[2, 0] = 5.0  # the red ball far off the table
    overlapping = good.copy()
    overlapping[1, 2:4] = overlapping[1, 0:2]  # blue on top of red
    not_finite = good.copy()
    not_finite[2, 3] = np.nan
    rollouts = [
        Rollout(good, np.array([1, 2]), True),
        Rollout(off_table, np.array([1, 2]), True),
        Rollout(overlapping, np.array([1, 2]), True),
        Rollout(not_finite, np.array([1, 2]), True),
        Rollout(good[:1], np.array([], dtype=np.int64), True),  # no step at all
    ]
    kept, share = filter_rollouts(rollouts, valid_state)
    assert kept == [0]
    assert share == pytest.approx(0.2)


def test_goal_match_rate_uses_the_success_function():
    goal = GOALS[0]  # one of KALM's relation goals
    rng = np.random.default_rng(1)
    states = [random_state(rng) for _ in range(40)]
    rollouts = [Rollout(np.stack([s, s]), np.array([0]), True) for s in states]
    expected = np.mean([success(s, goal) for s in states])
    assert goal_match_rate(rollouts, [goal] * 40, success) == pytest.approx(expected)


def test_a_grounded_model_imagines_rollouts_of_states_and_actions(tiny_model_dir):
    rng = np.random.default_rng(2)
    starts = np.stack([random_state(rng) for _ in range(3)]).astype(np.float32)
    model = GroundedLM.create(
        str(tiny_model_dir), GroundingSpec(state_dim=10, action_size=40), lora_r=2, states=starts
    )
    model.train(False)
    progress = []
    rollouts = imagine(
        model,
        starts,
        ["push the red ball"] * 3,
        max_steps=3,
        batch_size=2,
        on_progress=progress.append,
    )
    assert sum(progress) == 3 and len(rollouts) == 3
    for rollout, start in zip(rollouts, starts, strict=True):
        assert 1 <= len(rollout.actions) <= 3
        assert rollout.states.shape == (len(rollout.actions) + 1, 10)
        np.testing.assert_array_equal(rollout.states[0], start)
        assert all(0 <= a < 40 for a in rollout.actions)


def test_text_rollouts_parse_and_bad_numbers_are_filtered():
    start = np.zeros(2, np.float32)
    rollout = parse_text_rollout(" a3 [0.10, 0.20] a7 [0.30, 0.40] end", start, 2, 10)
    assert rollout.actions.tolist() == [3, 7] and rollout.stopped
    np.testing.assert_allclose(rollout.final_state, [0.3, 0.4])
    short = parse_text_rollout(" a3 [0.10] a5", start, 2, 10)
    assert len(short.actions) == 1 and np.isnan(short.final_state).all()
    assert filter_rollouts([short], lambda s: True)[0] == []


@pytest.mark.parametrize("state_target", ["absolute", "delta"])
def test_cached_imagination_matches_reading_the_whole_sequence(tiny_model_dir, state_target):
    """Rows of prompts of different lengths advance on the key/value cache (left-padded); each
    imagined state is what the model predicts when it reads the whole rollout so far (a delta
    head: added to the state before it)."""
    from llmrl.recipes.kalm.grounded_lm import trajectory_prompt

    rng = np.random.default_rng(3)
    starts = np.stack([random_state(rng) for _ in range(2)]).astype(np.float32)
    spec = GroundingSpec(state_dim=10, action_size=40, state_target=state_target)
    model = GroundedLM.create(str(tiny_model_dir), spec, lora_r=2, states=starts)
    model.train(False)
    texts = ["push the red ball", "could you please push the green ball behind the blue one"]
    rollouts = imagine(model, starts, texts, max_steps=2)
    for rollout, text in zip(rollouts, texts, strict=True):
        items = [*trajectory_prompt(text), ("state", rollout.states[0], False)]
        items.append(("action", rollout.actions[0], False))
        before = rollout.states[0][None]
        expected = model.predict_state(model.last_hidden([items]), before)[0]
        np.testing.assert_allclose(rollout.states[1], expected, atol=1e-4)


def test_the_goal_filter_keeps_exactly_the_valid_rollouts_that_meet_their_goal():
    goal = GOALS[0]  # red in front of blue... whichever: the success function decides
    rng = np.random.default_rng(3)
    meets, misses = [], []
    while len(meets) < 3 or len(misses) < 3:
        state = random_state(rng)
        (meets if success(state, goal) else misses).append(state)
    start = misses[0]
    invalid = meets[2].copy()
    invalid[0] = 5.0  # meets the goal? never mind: off the table
    rollouts = [
        Rollout(np.stack([start, meets[0]]), np.array([1]), True),  # valid, meets
        Rollout(np.stack([start, misses[1]]), np.array([1]), True),  # valid, misses
        Rollout(np.stack([start, meets[0], meets[1]]), np.array([1, 2]), True),  # meets
        Rollout(np.stack([start, meets[1], misses[2]]), np.array([1, 2]), True),  # leaves it
        Rollout(np.stack([start, invalid]), np.array([1]), True),  # invalid state
    ]
    goals = [goal] * len(rollouts)
    # reaching the goal and leaving it counts: the dataset cuts the rollout there as a success
    kept, share = select_rollouts(rollouts, valid_state, "goal", goals, success)
    assert kept == [0, 2, 3] and share == pytest.approx(0.6)
    assert [reaches_goal(r, goal, success) for r in rollouts[:4]] == [True, False, True, True]
    kept, share = select_rollouts(rollouts, valid_state, "valid", goals, success)
    assert kept == [0, 1, 2, 3] and share == pytest.approx(0.8)
    with pytest.raises(ValueError, match="imagined_filter"):
        select_rollouts(rollouts, valid_state, "lucky", goals, success)


def test_continuous_text_rollouts_parse_and_a_wrong_sized_action_is_dropped():
    start = np.zeros(2, np.float32)
    text = " [0.5, -0.5] [0.10, 0.20] [1.0, 0.0, 2.0] [0.30, 0.40] end"
    rollout = parse_text_rollout(text, start, 2, 10, discrete=False, action_dim=2)
    assert rollout.actions.shape == (2, 2) and rollout.stopped
    assert rollout.actions[0].tolist() == [0.5, -0.5] and np.isnan(rollout.actions[1]).all()
    kept, _ = filter_rollouts([rollout], lambda s: True)
    assert kept == []


@pytest.mark.parametrize("setting", ["batch_size", "max_steps"])
def test_imagination_sizes_must_be_positive(tiny_model_dir, setting):
    starts = np.stack([random_state(np.random.default_rng(0))]).astype(np.float32)
    model = GroundedLM.create(
        str(tiny_model_dir), GroundingSpec(state_dim=10, action_size=40), lora_r=2, states=starts
    )
    with pytest.raises(ValueError, match=f"{setting}: expected a positive integer"):
        imagine(model, starts, ["push the red ball"], **{setting: 0})


def test_sampled_imagination_is_seeded_and_explores_beyond_the_argmax(tiny_model_dir):
    """At a temperature the action is a draw from the head's softmax: the same seed gives the
    same rollouts, another seed others, and one instruction from one start is imagined in
    more than one way (greedy gives one)."""
    rng = np.random.default_rng(4)
    start = random_state(rng).astype(np.float32)
    spec = GroundingSpec(state_dim=10, action_size=40)
    model = GroundedLM.create(str(tiny_model_dir), spec, lora_r=2, states=start[None])
    model.train(False)
    starts = np.repeat(start[None], 16, axis=0)
    texts = ["push the red ball"] * 16

    def first_actions(**kwargs):
        return [int(r.actions[0]) for r in imagine(model, starts, texts, max_steps=1, **kwargs)]

    greedy = first_actions()
    assert len(set(greedy)) == 1
    drawn = first_actions(temperature=5.0, seed=1)
    assert drawn == first_actions(temperature=5.0, seed=1)
    assert drawn != first_actions(temperature=5.0, seed=2)
    assert len(set(drawn)) > 1
    assert first_actions(temperature=0.0, seed=1) == greedy  # 0: the argmax, whatever the seed


@pytest.mark.parametrize("temperature", [-1.0, float("nan")])
def test_a_bad_imagination_temperature_is_refused(tiny_model_dir, temperature):
    starts = np.stack([random_state(np.random.default_rng(0))]).astype(np.float32)
    model = GroundedLM.create(
        str(tiny_model_dir), GroundingSpec(state_dim=10, action_size=40), lora_r=2, states=starts
    )
    with pytest.raises(ValueError, match="temperature: expected a number >= 0"):
        imagine(model, starts, ["push the red ball"], temperature=temperature)


def test_sampling_continuous_actions_is_refused(tiny_model_dir):
    starts = np.zeros((1, 4), np.float32)
    spec = GroundingSpec(state_dim=4, action_size=None, action_dim=2)
    model = GroundedLM.create(str(tiny_model_dir), spec, lora_r=2, states=starts)
    with pytest.raises(ValueError, match="temperature: sampled imagination needs discrete"):
        imagine(model, starts, ["reach"], temperature=1.0)
