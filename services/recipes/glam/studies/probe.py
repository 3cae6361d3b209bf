"""GLAM diagnostic: does the frozen LLM's state already say which action BabyAI's bot takes?

    .venv/bin/python -m llmrl.recipes.glam.studies.probe --train-steps 2560 --test-steps 1024 \
        --torch-threads 2 --out runs/glam-probe

GLAM's LoRA-PPO plateaus on `BabyAIText-GoToLocalS5N2` (README, glam section), and behaviour
cloning of the bot with the same LoRA does better. This script separates the two explanations
the plateau leaves open, capacity and signal, without any RL:

1. BabyAI's bot plays `--train-steps` env steps (seed `--seed`, `--num-envs` at once) on
   `--env` and `--test-steps` more on the held-out seeds (`--seed` + the recipe's
   `eval_seed_offset`, its evaluation seeds); every bot step is GLAM's prompt and the bot's
   action phrase (`recipes.glam.training.collect_demonstrations`). The options that are the
   recipe's keys (`--env`, `--model`, `--train-steps`, `--num-envs`, `--reduction`, `--seed`)
   take its descriptions and checks (`GlamConfig`).
2. The frozen base model reads each prompt once; the last prompt token's hidden state is kept
   at several depths (`--layers`; the input of the top two layers is what a LoRA on them reads).
3. A logistic regression per depth (scikit-learn, standardised features) is fitted on the
   training steps and scored on the held-out ones, beside three references: always the bot's
   most frequent action, a bag of words of the prompt's last observation and goal (what a
   linear reader of the text itself gets), and the zero-shot GLAM policy itself (the phrase
   scores of `--reduction`: its argmax's accuracy and its mean probability of the bot's action).

A probe far above the zero-shot policy says the direction to act is linearly readable in the
frozen state, so a small head on top could carry it and PPO's signal is what limits GLAM at
this budget; a probe near the majority baseline says the representation does not carry it.
Prints one table and, last, one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from llmrl.recipes.glam.config import GlamConfig
from llmrl.recipes.options import add_model_options, parse_model_options

# the recipe's keys this study takes, and its defaults where they differ from the recipe's
RECIPE_KEYS = ["env", "model", "train_steps", "ppo.num_envs", "ppo.reduction", "seed"]
STUDY_DEFAULTS = {"train_steps": 2560, "ppo.num_envs": 8, "ppo.reduction": "mean"}


def read_examples(path: Path) -> list[tuple[str, str]]:
    """(prompt, bot phrase) per line of a `collect_demonstrations` file."""
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        messages = json.loads(line)["messages"]
        rows.append((messages[0]["content"], messages[1]["content"]))
    return rows


def last_token_states(
    policy: Any, prompts: list[str], layers: list[int], batch: int, desc: str
) -> Any:
    """[N, len(layers), H]: each prompt's last-token hidden state after each layer in `layers`
    (0: the embeddings; the model's depth: its final, normed state)."""
    import torch
    from tqdm import tqdm

    from llmrl.learner.llm.scorer import pad

    out = []
    with torch.no_grad():
        for start in tqdm(range(0, len(prompts), batch), desc=desc, unit="batch"):
            ids, mask = pad(
                [policy.encode(p) for p in prompts[start : start + batch]], policy.pad_id, left=True
            )
            positions = (mask.cumsum(-1) - 1).clamp(min=0)  # left padding: real tokens from 0
            result = policy.model(
                input_ids=ids,
                attention_mask=mask,
                position_ids=positions,
                output_hidden_states=True,
                logits_to_keep=1,
            )
            states = torch.stack([result.hidden_states[k][:, -1] for k in layers], dim=1)
            out.append(states.float())
    return torch.cat(out).numpy()


def zero_shot_policy(
    policy: Any, prompts: list[str], phrases: list[str], reduction: str, batch: int
) -> Any:
    """[N, len(phrases)]: the zero-shot GLAM policy's action probabilities."""
    import torch

    from llmrl.learner.llm.scorer import score_candidates

    candidates = [policy.encode(" " + phrase) for phrase in phrases]  # as llm_ppo scores them
    out = []
    with torch.no_grad():
        for start in range(0, len(prompts), batch):
            encoded = [policy.encode(p) for p in prompts[start : start + batch]]
            scores = score_candidates(policy, encoded, candidates, reduction).scores
            out.append(torch.softmax(scores.float(), dim=-1))
    return torch.cat(out).numpy()


def text_features(prompt: str) -> str:
    """The goal and the last observation of a GLAM prompt (what a bag of words reads)."""
    lines = prompt.splitlines()
    goal = next((line for line in lines if line.startswith("Goal of the agent")), "")
    observations = [line for line in lines if line.startswith("Observation")]
    return goal + " " + (observations[-1] if observations else "")


def probe(train_x: Any, train_y: Any, test_x: Any, test_y: Any, c: float) -> dict[str, float]:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    model = make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=3000))
    model.fit(train_x, train_y)
    return {
        "train_accuracy": float(model.score(train_x, train_y)),
        "test_accuracy": float(model.score(test_x, test_y)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # --train-steps: the bot's env steps to fit on; --num-envs: envs the bot plays at once;
    # --reduction: the zero-shot policy's phrase score (the reported GLAM setting's)
    add_model_options(parser, GlamConfig, RECIPE_KEYS, defaults=STUDY_DEFAULTS)
    parser.add_argument("--test-steps", type=int, default=1024, help="bot env steps held out")
    parser.add_argument(
        "--layers",
        type=int,
        nargs="+",
        default=[8, 16, 24, 28, 30],
        help="depths whose last-token state is probed (0: embeddings; 30: SmolLM2's final)",
    )
    parser.add_argument(
        "--probe-c", type=float, default=0.1, help="inverse L2 strength of the logistic regressions"
    )
    parser.add_argument("--batch-size", type=int, default=16, help="prompts per forward")
    parser.add_argument("--torch-threads", type=int, default=0, help="0: torch's default")
    parser.add_argument("--out", type=Path, default=Path("runs/glam-probe"), help="files here")
    args, config = parse_model_options(parser, GlamConfig, argv)
    for name in ("test_steps", "batch_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be positive")

    import numpy as np
    import torch
    from sklearn.feature_extraction.text import CountVectorizer
    from tqdm import tqdm

    from llmrl.learner.llm.model import LlmPolicyModel
    from llmrl.recipes.glam.prompt import action_phrases
    from llmrl.recipes.glam.training import collect_demonstrations

    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    args.out.mkdir(parents=True, exist_ok=True)
    held_out = config.seed + config.eval_seed_offset
    splits = {"train": (config.seed, config.train_steps), "test": (held_out, args.test_steps)}
    # files are named by what they hold, so a rerun with other settings never reads stale ones
    bot_name = f"{config.env}-e{config.ppo.num_envs}".replace("/", "_")
    model_name = f"{Path(config.model).name}-L{'_'.join(map(str, args.layers))}"
    data = {}
    for split, (seed, steps) in splits.items():
        path = args.out / f"bot-{split}-{bot_name}-s{seed}-n{steps}.jsonl"
        if not path.exists():
            with tqdm(total=steps, desc=f"bot, {split}", unit="step") as bar:
                collect_demonstrations(
                    config.env,
                    path.with_suffix(".part"),
                    steps=steps,
                    num_envs=config.ppo.num_envs,
                    seed=seed,
                    on_progress=bar.update,
                )
            path.with_suffix(".part").rename(path)
        data[split] = read_examples(path)
    env_phrases = list(action_phrases("babyai"))  # the policy's candidates, in its order
    unknown = sorted({phrase for rows in data.values() for _, phrase in rows} - set(env_phrases))
    if unknown:
        parser.error(
            f"--env: the bot's actions {unknown} are not BabyAI-Text's phrases {env_phrases}; "
            "the probe reads envs with that action set"
        )

    policy = LlmPolicyModel.load(config.model, lora=False, bf16=False, device="cpu")
    policy.model.eval()
    depth = int(policy.model.config.num_hidden_layers)
    bad = [k for k in args.layers if not 0 <= k <= depth]
    if bad:
        parser.error(f"--layers: {bad} outside [0, {depth}] for {config.model}")
    states, labels = {}, {}
    for split, rows in data.items():
        seed, steps = splits[split]
        cache = args.out / f"states-{split}-{bot_name}-s{seed}-n{steps}-{model_name}.npy"
        prompts = [prompt for prompt, _ in rows]
        if cache.exists():
            states[split] = np.load(cache, allow_pickle=False)
        else:
            states[split] = last_token_states(
                policy, prompts, args.layers, args.batch_size, desc=f"states, {split}"
            )
            np.save(cache, states[split], allow_pickle=False)
        labels[split] = np.array([phrase for _, phrase in rows])

    counts = Counter(labels["train"].tolist())
    majority = counts.most_common(1)[0][0]
    figures: dict[str, Any] = {
        "env": config.env,
        "train_examples": len(data["train"]),
        "test_examples": len(data["test"]),
        "bot_actions_train": dict(counts),
        "majority_test_accuracy": float(np.mean(labels["test"] == majority)),
    }
    words = CountVectorizer(token_pattern=r"[A-Za-z]+|\d+", binary=True)
    bow_train = words.fit_transform([text_features(p) for p, _ in data["train"]]).toarray()
    bow_test = words.transform([text_features(p) for p, _ in data["test"]]).toarray()
    figures["bag_of_words"] = probe(
        bow_train, labels["train"], bow_test, labels["test"], args.probe_c
    )
    figures["layers"] = {}
    for i, layer in enumerate(args.layers):
        figures["layers"][str(layer)] = probe(
            states["train"][:, i],
            labels["train"],
            states["test"][:, i],
            labels["test"],
            args.probe_c,
        )

    test_prompts = [prompt for prompt, _ in data["test"]]
    probs = zero_shot_policy(
        policy, test_prompts, env_phrases, config.ppo.reduction, args.batch_size
    )
    target = np.array([env_phrases.index(y) for y in labels["test"]])
    figures["zero_shot"] = {
        "argmax_accuracy": float(np.mean(probs.argmax(-1) == target)),
        "mean_probability_of_bot_action": float(np.mean(probs[np.arange(len(target)), target])),
        "mean_policy": dict(zip(env_phrases, probs.mean(0).round(3).tolist(), strict=True)),
    }

    print(
        f"\n{config.env}: {figures['train_examples']} bot steps to fit, "
        f"{figures['test_examples']} held out; bot's actions {dict(counts)}\n"
    )
    print("| reader | train accuracy | held-out accuracy |\n|---|---|---|")
    print(f"| always {majority!r} | | {figures['majority_test_accuracy']:.3f} |")
    bow = figures["bag_of_words"]
    print(
        f"| bag of words (goal + last observation) | {bow['train_accuracy']:.3f} | "
        f"{bow['test_accuracy']:.3f} |"
    )
    for layer, row in figures["layers"].items():
        print(
            f"| frozen {config.model}, layer {layer} state | {row['train_accuracy']:.3f} | "
            f"{row['test_accuracy']:.3f} |"
        )
    zero = figures["zero_shot"]
    print(
        f"| zero-shot GLAM policy ({config.ppo.reduction}), argmax | "
        f"| {zero['argmax_accuracy']:.3f} |"
    )
    print(
        f"\nzero-shot policy's mean probability of the bot's action: "
        f"{zero['mean_probability_of_bot_action']:.3f}"
    )
    (args.out / "probe.json").write_text(json.dumps(figures, indent=2), encoding="utf-8")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
