"""Can a When2Ask mediator tell a wrong plan from its own observation? (a diagnostic)

    .venv/bin/python -m llmrl.recipes.when2ask.studies.wrong_plans [--planner-noise 0.2] \
        [--planner-noise-mode fresh] [--max-steps 25] [--steps 30000]

The learned mediator gains +4 to +5 points over the best fixed rule, while a privileged rule
that asks exactly when the plan in hand is wrong gains +11 to +15. This study asks whether the
information for the difference is in the mediator's observation at all. It plays mediator
episodes with the noisy planner (which knows which of its plans it made wrong) under a random
asking rule, records at every step the observation and whether the plan in hand is wrong, and
fits a gradient-boosted classifier (scikit-learn) on the first two thirds of the episodes. On
the last third it reports the ROC AUC of telling a wrong plan from a right one, from

- `base`: the paper's observation (the view, its changes, the plan bookkeeping flags),
- `base+plan`: with the skill in hand (`mediator_sees_plan`),
- `base+knowledge`: with the planner's input and answer (`mediator_sees_knowledge`),

over every step with a plan, and over the first step after a query (when a fresh plan is in
hand: the moment a mediator would ask again). An AUC near 1 says the observation holds what
a perfect asking rule needs, so what a learned mediator misses is PPO's to learn, not
information; near 0.5, the observation cannot tell. The last line is a JSON object.

The planner's error rate and mode, the step cap, the tasks and the seed are the recipe's keys
(`--planner-noise`, `--planner-noise-mode`, `--max-steps`, `--envs`, `--seed`: its
descriptions and checks, `When2AskConfig`); `--ask-rate` and `--steps` are the study's own.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.metrics import roc_auc_score
from tqdm import tqdm

from llmrl.planners.noisy_oracle import NoisyOraclePlanner
from llmrl.recipes.options import add_model_options, parse_model_options
from llmrl.recipes.when2ask.config import When2AskConfig
from llmrl.recipes.when2ask.mediator import ASK, CARRY_ON, OBS_SIZE, PLAN_FEATURES, MediatorEnv
from llmrl.recipes.when2ask.mediator_settings import MediatorSettings
from llmrl.simulator.world import World

# the recipe's keys this study takes, and its defaults where they differ from the recipe's
RECIPE_KEYS = ["planner_noise", "planner_noise_mode", "max_steps", "envs", "seed"]
STUDY_DEFAULTS = {"max_steps": 25, "seed": 7}  # the reported cap (errors cost); its seed
FEATURE_SETS = {
    "base": slice(0, OBS_SIZE),
    "base+plan": slice(0, OBS_SIZE + PLAN_FEATURES),
    "base+knowledge": slice(None),
}


def collect(
    task: str, config: When2AskConfig, steps: int, ask_rate: float
) -> tuple[np.ndarray, ...]:
    """Observations, labels (plan in hand wrong), query flags and episode ids of `steps`
    mediator steps under random asking (probability `ask_rate` per step), with the noisy
    planner, step cap and seed of `config`."""
    env = MediatorEnv(
        lambda: World(task, 1, seed=config.seed),
        NoisyOraclePlanner(config.planner_noise, seed=config.seed, mode=config.planner_noise_mode),
        MediatorSettings(sees_knowledge=True),
        max_steps=config.max_steps,
    )
    rng = np.random.default_rng(config.seed)
    env.reset(seed=config.seed)
    rows, wrong, queried, episode_ids, episode = [], [], [], [], 0
    for _ in tqdm(range(steps), desc=task, unit="step", leave=False):
        action = ASK if rng.random() < ask_rate else CARRY_ON
        obs, _, terminated, truncated, info = env.step(action)
        if env.core.plan:  # a plan in hand, right or wrong
            rows.append(obs)
            wrong.append(bool(env.core.wrong_plan_in_hand))
            queried.append(bool(info.get("queried", False)))
            episode_ids.append(episode)
        if terminated or truncated:
            env.reset()
            episode += 1
    env.close()
    return np.array(rows), np.array(wrong), np.array(queried), np.array(episode_ids)


def auc(x: np.ndarray, y: np.ndarray, train: np.ndarray, test: np.ndarray, seed: int) -> float:
    """ROC AUC on `test` of a classifier fitted on `train` (nan when a split has one class)."""
    if len(set(y[train])) < 2 or len(set(y[test])) < 2:
        return float("nan")
    model = HistGradientBoostingClassifier(max_iter=200, random_state=seed)
    model.fit(x[train], y[train])
    return float(roc_auc_score(y[test], model.predict_proba(x[test])[:, 1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_model_options(parser, When2AskConfig, RECIPE_KEYS, defaults=STUDY_DEFAULTS)
    parser.add_argument(
        "--ask-rate",
        type=float,
        default=0.25,
        help="chance per step that the random rule asks (sets how often plans change)",
    )
    parser.add_argument("--steps", type=int, default=30000, help="mediator steps per task")
    args, config = parse_model_options(parser, When2AskConfig, argv)
    if not 0.0 <= args.ask_rate <= 1.0:
        parser.error("--ask-rate must be in [0, 1]")
    if args.steps < 100:
        parser.error("--steps must be at least 100")

    results = {}
    print("| task | wrong share | when | " + " | ".join(f"AUC {n}" for n in FEATURE_SETS) + " |")
    print("|---|---|---|" + "---|" * len(FEATURE_SETS))
    for task in config.envs:
        x, y, queried, episode_ids = collect(task, config, args.steps, args.ask_rate)
        train_all = episode_ids < episode_ids.max() * 2 // 3
        results[task] = {"wrong_share": float(y.mean()), "steps": len(y)}
        for when, mask in (("every step", np.ones_like(y)), ("after a query", queried)):
            train, test = train_all & mask, ~train_all & mask
            aucs = {
                name: auc(x[:, cols], y, train, test, config.seed)
                for name, cols in FEATURE_SETS.items()
            }
            results[task][when] = aucs
            cells = " | ".join(f"{v:.3f}" for v in aucs.values())
            print(f"| {task} | {y[mask].mean():.3f} | {when} | {cells} |", flush=True)
    noise = {"noise": config.planner_noise, "noise_mode": config.planner_noise_mode}
    print(json.dumps({**noise, "tasks": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
