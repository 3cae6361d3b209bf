"""GLAM's DRRN baseline: the text encoding, the Q-network's phrase scoring, learning a trivial
text env by SB3 DQN, and its driver played from the saved model."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import support.tiny_text_env  # noqa: F401  (registers TinyTextGoForward)
import torch
from support.tiny_text_env import CORRECT, ENV_ID, PHRASES

from llmrl.agents import make_driver
from llmrl.recipes.glam.drrn import DrrnVecEnv, cached_drrn, state_row, train_drrn
from llmrl.recipes.glam.drrn_policy import DrrnLayout, DrrnScorer, encode, word_ids
from llmrl.recipes.glam.prompt import PromptHistory
from llmrl.simulator.client import make_world

SMALL = DrrnLayout(state_words=12, phrase_words=3, vocab=64, embedding_dim=8, hidden_dim=8)


def test_the_goal_is_kept_and_the_history_cut_to_its_most_recent_words():
    layout = DrrnLayout(state_words=6, phrase_words=2, vocab=1000)
    row = encode(layout, "go to the box", "one two three four five", PHRASES)
    ids = lambda text: word_ids(text, layout.vocab)  # noqa: E731
    assert row[:6].tolist() == ids("go to the box") + ids("four five")
    assert row[6:8].tolist() == ids("turn left") and row[10:12].tolist() == ids("go forward")
    assert row[14:16].tolist() == [ids("drop")[0], 0]  # phrase 4, padded
    assert all(0 < i < 1000 for i in ids("dax zorblat tourner à gauche 12"))
    with pytest.raises(ValueError, match="phrases: expected 6"):
        encode(layout, "goal", "", PHRASES[:5])


def test_the_state_is_the_glam_prompt_without_its_action_line():
    history = PromptHistory(PHRASES)
    history.start("go to the red ball", "You see a red ball 1 step left")
    history.advance("turn left", "You see a red ball 1 step forward")
    layout = DrrnLayout(state_words=64)
    row = state_row(layout, history)
    expected = word_ids("Goal of the agent: go to the red ball", layout.vocab)
    expected += word_ids(history.prompt().split("\n", 2)[2], layout.vocab)
    assert row[: len(expected)].tolist() == expected
    assert not row[len(expected) : 64].any()


def test_q_values_belong_to_phrases_not_to_slots():
    torch.manual_seed(0)
    scorer = DrrnScorer(SMALL).eval()
    row = encode(SMALL, "go to the goal", "you see the goal", PHRASES)
    swapped = encode(SMALL, "go to the goal", "you see the goal", PHRASES[::-1])
    with torch.no_grad():
        q = scorer(torch.as_tensor(np.stack([row, swapped])))
    assert q.shape == (2, 6)
    assert torch.allclose(q[0], q[1].flip(0), atol=1e-6)
    assert len(set(q[0].round(decimals=5).tolist())) == 6


def test_bad_layout_names_the_key():
    with pytest.raises(ValueError, match=r"drrn\.hidden_dim"):
        DrrnLayout(hidden_dim=0)
    with pytest.raises(ValueError, match=r"drrn\.vocab"):
        DrrnLayout(vocab=1)


def test_the_vec_env_restarts_a_finished_episode_with_a_fresh_history():
    env = DrrnVecEnv(make_world(ENV_ID, num_envs=2, seed=0), SMALL, reward_scale=20.0)
    first = env.reset()
    rows, rewards, dones, infos = env.step(np.array([PHRASES.index(CORRECT), 0]))
    assert dones.tolist() == [True, False] and rewards.tolist() == [20.0, 0.0]
    assert np.array_equal(rows[0], first[0])  # the next episode's first observation
    assert not np.array_equal(rows[1], first[1])  # one action and observation more
    assert infos[0]["terminal_observation"].shape == (SMALL.size,)
    assert env.histories[0].actions == [] and env.histories[1].actions == ["turn left"]
    env.close()


def test_drrn_learns_the_one_correct_phrase_and_its_driver_plays_it(tmp_path: Path):
    torch.set_num_threads(1)
    out = train_drrn(
        ENV_ID,
        tmp_path / "drrn",
        steps=768,
        num_envs=4,
        num_steps=32,
        learning_rate=3e-3,
        eval_every=3,
        seed=0,
        layout=SMALL,
        batch_size=32,
        learning_starts=64,
    )
    assert [p["update"] for p in out["points"]] == [3, 6]
    assert out["global_step"] == 768 and Path(out["model"]).is_file()

    model = cached_drrn(out["model"])
    assert cached_drrn(out["model"]) is model  # loaded once per file version
    driver = make_driver
    observation = {"text": "You see the goal 1 step forward", "mission": "go to the goal"}

    def played(seed: int, greedy: bool) -> list[int]:
        policy = {"kind": "glam-drrn", "model": out["model"], "greedy": greedy}
        play = driver(policy, None, SimpleNamespace(seed=seed))
        return [play.act(observation, t).action for t in range(30)]

    greedy = played(0, greedy=True)
    assert set(greedy) == {PHRASES.index(CORRECT)}
    sampled = played(5, greedy=False)
    assert sampled == played(5, greedy=False)  # seeded by the episode
    # a softmax over Q-values: a wrong phrase only costs a discount here (Q ~ 0.9 x 20
    # against 20), so the correct one is drawn ~60% of the time, against 1/6 at random
    assert sum(a == PHRASES.index(CORRECT) for a in sampled) >= 12
    with pytest.raises(ValueError, match=r"policy\.model: .*names no artifact llmrl saved"):
        driver(
            {"kind": "glam-drrn", "model": str(tmp_path / "none.zip")},
            None,
            SimpleNamespace(seed=0),
        )
