"""A short PPO run learns to ask less than random-ask, at no loss of success."""

from __future__ import annotations

import numpy as np
from stable_baselines3.common.vec_env import DummyVecEnv

from llmrl.common.registry import registry
from llmrl.planners.base import make_planner
from llmrl.recipes.when2ask.asking import LearnedAsk, RandomAsk
from llmrl.recipes.when2ask.mediator import MediatorEnv
from llmrl.recipes.when2ask.mediator_settings import MediatorSettings
from llmrl.simulator.world import World

SEEDS = range(500, 520)


def make_env(seed: int) -> MediatorEnv:
    return MediatorEnv(
        lambda: World("SimpleDoorKey", 1, seed=seed),
        make_planner("oracle"),
        MediatorSettings(lam=0.05),
    )


def evaluate(policy) -> tuple[float, float]:
    """Mean penalised return and success rate over the fixed seeds."""
    env = make_env(0)
    returns, successes = [], []
    for seed in SEEDS:
        obs, _ = env.reset(seed=seed)
        total, done, info = 0.0, False, {}
        while not done:
            obs, reward, terminated, truncated, info = env.step(int(policy.ask(obs)))
            total += reward
            done = terminated or truncated
        returns.append(total)
        successes.append(info["episode"]["success"])
    return float(np.mean(returns)), float(np.mean(successes))


def test_short_ppo_beats_random_ask(tmp_path):
    vec_env = DummyVecEnv([lambda i=i: make_env(i) for i in range(4)])
    ppo = registry.get_algorithm("ppo")
    checkpoint = ppo.train(
        vec_env,
        tmp_path / "line",
        total_timesteps=4096,
        seed=0,
        n_steps=128,
        batch_size=128,
        learning_rate=1e-3,
        tensorboard_dir=tmp_path / "tb",
    )
    model = ppo.load(checkpoint)
    learned_return, learned_success = evaluate(LearnedAsk(model))
    random_return, random_success = evaluate(RandomAsk(0.5, seed=0))
    assert learned_return > random_return
    assert learned_success >= random_success - 0.1
    assert list((tmp_path / "tb").rglob("events.out.tfevents*"))
