"""GLAM diagnostic: how loud is PPO's signal for which way to turn, against its noise?

    .venv/bin/python -m llmrl.recipes.glam.studies.signal --states 400 --rollouts 32 \
        --out runs/glam-signal

GLAM's LoRA-PPO on `BabyAIText-GoToLocalS5N2` learns to say "go forward" more and "drop" and
"toggle" less, but not which way to turn, although a linear probe of the frozen model's state
predicts the bot's turn (README, glam section; `llmrl.recipes.glam.studies.probe`). This study
measures, without any LLM, what PPO's advantages can say about a turn at this budget:

1. A behaviour policy that ignores the view (`--behaviour`: uniform over the six actions, or the
   mean policies that the zero-shot model and a trained GLAM LoRA showed over their held-out
   steps) plays the level of `--env` from the training seeds (`--seed` on); BabyAI's bot
   follows every step and names its action.
2. At each visited state where the bot turns (left or right), the level is copied twice: one
   copy takes the bot's turn, the other the opposite one, and each then plays on with the
   behaviour policy to the episode's end, `--rollouts` times. A rollout's return is GLAM's
   PPO target: BabyAI's reward times `--reward-scale`, discounted by `--gamma`.
3. Per state, the gap Q(correct turn) - Q(wrong turn) is the signal an advantage carries about
   the turn; the return's spread is its noise: within the state (a perfect value baseline) and
   over all turn states (a constant baseline, what a value head that has learned little gives).

From these it prints what one turn decision is worth to a policy that must learn which turn is
right from the view. For two turns at even odds, PPO's expected gradient on a turn's logit is a
quarter of the gap and its noise half the return's spread, where behaviour cloning's are a half
and a half: one sampled decision carries (gap / 2 spread)^2 of a labelled example's
gradient signal (the squared gap averaged over states, less its estimate's own noise). Set
against the bot's turn labels that BC learned from (`--bc-turn-labels`: 2,592 in the README's
5,120-step BC run) and the turn decisions an update of `--num-envs` x `--num-steps` env
steps holds, this gives the PPO updates that carry as much turn signal as BC had.

Last, what a view-blind policy can do: success on the held-out seeds (`--blind-episodes` each)
of each behaviour, of each `--blind-policy` (e.g. a trained GLAM's mean policy, as its report
prints it), and of policies that go forward with probability f and turn either way with the
rest. Prints two tables and, last, one JSON object with every figure.

The options that are the recipe's keys (`--env`, `--gamma`, `--reward-scale`, `--num-envs`,
`--num-steps`, `--seed`) take its descriptions and checks (`GlamConfig`).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import sys
from pathlib import Path
from typing import Any

from llmrl.recipes.glam.config import GlamConfig
from llmrl.recipes.options import add_model_options, parse_model_options

# the recipe's keys this study takes, and its defaults where they differ from the recipe's
RECIPE_KEYS = ["env", "ppo.gamma", "ppo.reward_scale", "ppo.num_envs", "ppo.num_steps", "seed"]
STUDY_DEFAULTS = {"ppo.num_envs": 8}  # the reported setting's envs per PPO update

# mean probabilities of turn left / turn right / go forward / pick up / drop / toggle over the
# held-out steps of the README's runs (the zero-shot model; GLAM's LoRA after 1,280 env steps)
BEHAVIOURS = {
    "uniform": (1 / 6,) * 6,
    "zero-shot": (0.21, 0.28, 0.12, 0.21, 0.05, 0.13),
    "glam": (0.18, 0.27, 0.25, 0.22, 0.03, 0.04),
}
TURNS = (0, 1)  # minigrid's left, right


def normalised(probs: Any) -> Any:
    """`probs` as float64 probabilities that sum to 1 (what `Generator.choice` requires)."""
    import numpy as np

    probs = np.asarray(probs, dtype=np.float64)
    return probs / probs.sum()


def play_out(level: Any, first: int, probs: Any, rng: Any, gamma: float, scale: float) -> float:
    """The discounted, scaled return of `first` then the behaviour policy, to the episode's end."""
    total, discount, action = 0.0, 1.0, first
    while True:
        _, reward, terminated, truncated, _ = level.step(action)
        total += discount * reward * scale
        if terminated or truncated:
            return total
        discount *= gamma
        action = int(rng.choice(len(probs), p=probs))


def level_of(env: str) -> str | None:
    """The BabyAI level (or mix) a registered BabyAI-Text env plays; None for other envs."""
    from llmrl.common.registry import registry
    from llmrl.simulator.envs.babyai_text.env import BabyAITextEnv

    entry = registry.entry("env", env)
    if entry.obj is not BabyAITextEnv:
        return None
    return entry.metadata.get("kwargs", {}).get("level")


def measure(args: argparse.Namespace, config: GlamConfig, level: str, name: str) -> dict[str, Any]:
    """The turn states one behaviour visits, with each turn's returns."""
    import numpy as np
    from tqdm import tqdm

    from llmrl.simulator.envs.babyai_text.env import BabyAITextEnv

    probs = normalised(BEHAVIOURS[name])
    rng = np.random.default_rng(config.seed)
    env = BabyAITextEnv(level=level, expert=True)
    discounting = (config.ppo.gamma, config.ppo.reward_scale)
    gaps, within, correct_returns, wrong_returns = [], [], [], []
    steps = episodes = successes = 0
    episode_seed = config.seed
    with tqdm(total=args.states, desc=f"turn states, {name}", unit="state") as bar:
        obs, _ = env.reset(seed=episode_seed)
        while len(gaps) < args.states:
            plan = str(obs.get("oracle_plan", ""))
            bot = env.actions.index(plan) if plan in env.actions else None
            if bot in TURNS:
                runs = {
                    turn: [
                        play_out(copy.deepcopy(env.level), turn, probs, rng, *discounting)
                        for _ in range(args.rollouts)
                    ]
                    for turn in TURNS
                }
                right, wrong = np.asarray(runs[bot]), np.asarray(runs[1 - bot])
                gaps.append(float(right.mean() - wrong.mean()))
                within.append(float(np.sqrt((right.var(ddof=1) + wrong.var(ddof=1)) / 2)))
                correct_returns.extend(right.tolist())
                wrong_returns.extend(wrong.tolist())
                bar.update(1)
            action = int(rng.choice(len(probs), p=probs))
            obs, reward, terminated, truncated, _ = env.step(action)
            steps += 1
            if terminated or truncated:
                episodes += 1
                successes += int(terminated and reward > 0)
                episode_seed += 1
                obs, _ = env.reset(seed=episode_seed)
    gap = float(np.mean(gaps))
    noise_within = float(np.sqrt(np.mean(np.square(within))))
    noise_total = float(np.std(correct_returns + wrong_returns, ddof=1))
    # E[gap^2] without the noise of each state's estimate (variance 2 sigma^2 / rollouts)
    squared_gap = float(np.mean(np.square(gaps)) - 2 * np.mean(np.square(within)) / args.rollouts)
    label_share = {
        label: max(squared_gap, 0.0) / (4 * sigma**2)
        for label, sigma in (("perfect_baseline", noise_within), ("constant", noise_total))
    }
    turn_share = len(gaps) / steps
    per_update = (
        config.ppo.num_envs * config.ppo.num_steps * turn_share * float(probs[list(TURNS)].sum())
    )
    updates = {
        label: args.bc_turn_labels / (share * per_update) if share > 0 else None
        for label, share in label_share.items()
    }
    return {
        "behaviour": name,
        "probabilities": probs.round(4).tolist(),
        "turn_states": len(gaps),
        "behaviour_steps": steps,
        "behaviour_success": successes / episodes if episodes else None,
        "bot_turn_share_of_steps": turn_share,
        "mean_gap": gap,
        "gap_quartiles": np.percentile(gaps, [25, 50, 75]).tolist(),
        "share_of_states_right_turn_better": float(np.mean(np.asarray(gaps) > 0)),
        "mean_return_right_turn": float(np.mean(correct_returns)),
        "mean_return_wrong_turn": float(np.mean(wrong_returns)),
        "noise_within_state": noise_within,
        "noise_over_states": noise_total,
        "rms_gap": math.sqrt(max(squared_gap, 0.0)),
        "labelled_examples_per_turn_decision": label_share,
        "turn_decisions_per_update": per_update,
        "updates_for_bc_turn_labels": updates,
    }


def blind_success(level: str, probs: Any, episodes: int, seed: int) -> float:
    """Success of a view-blind policy (`probs` over the six actions) over `episodes` seeds."""
    import numpy as np

    from llmrl.simulator.envs.babyai_text.env import BabyAITextEnv

    probs = normalised(probs)
    env, rng, successes = BabyAITextEnv(level=level), np.random.default_rng(seed), 0
    for episode in range(episodes):
        env.reset(seed=seed + episode)
        while True:
            action = int(rng.choice(len(probs), p=probs))
            _, reward, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                successes += int(terminated and reward > 0)
                break
    return successes / episodes


def parse_blind_policy(text: str, parser: argparse.ArgumentParser) -> tuple[str, list[float]]:
    """NAME=P1,...,P6 -> (name, probabilities); a clear error otherwise."""
    name, _, numbers = text.partition("=")
    try:
        probs = [float(n) for n in numbers.split(",")]
    except ValueError:
        probs = []
    if not name or len(probs) != 6 or min(probs) < 0 or sum(probs) <= 0:
        parser.error(
            f"--blind-policy {text!r}: expected NAME=P1,...,P6, six non-negative numbers "
            "(turn left, turn right, go forward, pick up, drop, toggle), not all zero"
        )
    return name, probs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # --env: the level played; --gamma, --reward-scale: PPO's discount and reward multiplier;
    # --num-envs x --num-steps: the env steps of one PPO update
    add_model_options(parser, GlamConfig, RECIPE_KEYS, defaults=STUDY_DEFAULTS)
    parser.add_argument(
        "--behaviour",
        nargs="+",
        choices=sorted(BEHAVIOURS),
        default=["uniform", "zero-shot", "glam"],
        help="view-blind policies that play before and after each turn (see BEHAVIOURS)",
    )
    parser.add_argument("--states", type=int, default=400, help="turn states per behaviour")
    parser.add_argument("--rollouts", type=int, default=32, help="play-outs per turn and state")
    parser.add_argument(
        "--bc-turn-labels",
        type=int,
        default=2592,
        help="the bot's turn labels BC learned from (README: 1,573 right + 1,019 left)",
    )
    parser.add_argument(
        "--blind-episodes",
        type=int,
        default=400,
        help="held-out episodes per view-blind policy of the search (0: no search)",
    )
    parser.add_argument(
        "--blind-policy",
        nargs="*",
        default=[],
        metavar="NAME=P1,...,P6",
        help="more view-blind policies to play on the held-out seeds: a name and the six "
        "actions' probabilities (turn left, turn right, go forward, pick up, drop, toggle), "
        "e.g. a trained policy's mean over its held-out steps from the GLAM report",
    )
    parser.add_argument("--out", type=Path, default=Path("runs/glam-signal"), help="JSON here")
    args, config = parse_model_options(parser, GlamConfig, argv)
    for name, least in (("states", 1), ("rollouts", 2), ("bc_turn_labels", 1)):
        if getattr(args, name) < least:
            parser.error(f"--{name.replace('_', '-')} must be at least {least}")
    extra = [parse_blind_policy(text, parser) for text in args.blind_policy]
    level = level_of(config.env)
    if level is None:
        parser.error(f"--env: {config.env!r} is not a BabyAI-Text level; this study plays those")

    results = [measure(args, config, level, name) for name in args.behaviour]
    print(
        "| behaviour (view-blind) | its success | Q(right turn) - Q(wrong turn): mean [quartiles]"
        " / rms | states where the right turn is better | return spread: within a state / over"
        " states | one turn decision in labelled examples (perfect / constant baseline) "
        f"| turn decisions per update | updates for BC's {args.bc_turn_labels:,} turn labels |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        q = r["gap_quartiles"]
        success = "–" if r["behaviour_success"] is None else f"{r['behaviour_success']:.2f}"
        share = r["labelled_examples_per_turn_decision"]
        upd = {k: f"{v:,.0f}" if v else "never" for k, v in r["updates_for_bc_turn_labels"].items()}
        print(
            f"| {r['behaviour']} | {success} | {r['mean_gap']:.2f} "
            f"[{q[0]:.2f}, {q[1]:.2f}, {q[2]:.2f}] / {r['rms_gap']:.2f} "
            f"| {r['share_of_states_right_turn_better']:.2f} "
            f"| {r['noise_within_state']:.2f} / {r['noise_over_states']:.2f} "
            f"| {share['perfect_baseline']:.3f} / {share['constant']:.3f} "
            f"| {r['turn_decisions_per_update']:.0f} "
            f"| {upd['perfect_baseline']} / {upd['constant']} |"
        )
    # the best a policy that never reads the view can do: go forward with probability f, turn
    # either way with (1 - f) / 2, never the three actions that do nothing on a go-to level
    blind = []
    if args.blind_episodes > 0:
        held_out = config.seed + config.eval_seed_offset
        print(
            "\n| view-blind policy | turn left / turn right / go forward / pick up / drop / toggle"
            " | held-out success |\n|---|---|---|"
        )
        policies = [(name, None, list(BEHAVIOURS[name])) for name in args.behaviour]
        policies += [(name, None, probs) for name, probs in extra]
        for forward in [round(0.1 * k, 1) for k in range(1, 10)]:
            turn = (1 - forward) / 2
            policies.append((f"forward {forward:.1f}", forward, [turn, turn, forward, 0, 0, 0]))
        for name, forward, probs in policies:
            success = blind_success(level, probs, args.blind_episodes, held_out)
            blind.append({"policy": name, "forward": forward, "probs": probs, "success": success})
            shown = " / ".join(f"{p:.2f}" for p in probs)
            print(f"| {name} | {shown} | {success:.3f} |")
    args.out.mkdir(parents=True, exist_ok=True)
    options = {k: str(v) for k, v in vars(args).items() if not k.startswith("_")}
    summary = {
        "settings": options,  # the study's own options and the recipe's keys it took
        "results": results,
        "view_blind_search": blind,
    }
    (args.out / "signal.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
