"""GLAM's PPO loop speed: env-steps/s of LLM-PPO as built versus a naive loop.

Both run the same PPO (same env, envs, steps, epochs, minibatches, seed) on BabyAI-Text:
  * `fast`: `llm-ppo` as trained (`train_llm_ppo`): each step one batched, KV-shared forward
    of every env's prompt and the six candidates, LoRA on the top `--lora-layers` layers,
    the rollout keeping the frozen layers' hidden states so the epochs run only the top ones;
  * `naive`: one full forward per (env, action) (prompt + phrase, no shared KV, no batching),
    LoRA on every layer, the update scoring each sample again the same way and
    back-propagating through all layers (one sample at a time, gradients accumulated over the
    minibatch, so memory stays bounded; the same gradient step as the minibatch's).
Each reports the rollout (incl. GAE's bootstrap) and update seconds; SPS = env steps / their
sum. The machine is shared, so the process CPU seconds of the same phases are reported too:
their ratio (per env step) is less sensitive to other processes' load than wall time. The
naive loop scores every env alone, so its steps/s do not depend on how many envs it steps:
`--naive-envs 2` measures it in an eighth of the time of 16 (ratios are per env step).
The last line printed is one JSON object with every figure.

    python bench/glam.py                      # SmolLM2-135M, 16 envs x 1 step, 1 update
    python bench/glam.py --model tiny --lora-layers 1   # a tiny random Llama: a quick check
    python bench/glam.py --rollout-steps 2 --update-epochs 2 --updates 2
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from llmrl.recipes.glam.config import GlamConfig
from llmrl.recipes.options import add_model_options, parse_model_options


def settings(args: argparse.Namespace, model: str) -> dict[str, Any]:
    """The llm-ppo settings both modes share."""
    return {
        "base_model": model,
        "total_timesteps": args.num_envs * args.num_steps * args.updates,
        "ppo": {
            "num_envs": args.num_envs,
            "num_steps": args.num_steps,
            "update_epochs": args.update_epochs,
            "minibatch_size": args.minibatch_size,
            "learning_rate": 1e-4,
            "lora_r": 16,
        },
        "bf16": False,
        "seed": 0,
        "torch_threads": args.threads,
    }


def run_fast(args: argparse.Namespace, model: str, out: Path) -> dict[str, float]:
    """llm-ppo as built: batched, KV-shared scoring, frozen-layer cache."""
    import llmrl.recipes.glam.llm_ppo  # noqa: F401  (registers llm-ppo)
    from llmrl.common.registry import registry
    from llmrl.learner.versions import Versions

    shared = settings(args, model)
    checkpoint = registry.get_algorithm("llm-ppo").train(
        args.env,
        Versions(out / "fast"),
        checkpoint_every=10**6,
        **shared | {"ppo": shared["ppo"] | {"lora_layers": args.lora_layers, "cache_frozen": True}},
    )
    result = checkpoint.result
    return {
        "rollout_seconds": result["rollout_seconds"],
        "update_seconds": result["update_seconds"],
        "cpu_seconds": result["rollout_cpu_seconds"] + result["update_cpu_seconds"],
        "env_steps": result["global_step"],
    }


def naive_scores(policy: Any, prompt: list[int], candidates: list[list[int]]) -> tuple[Any, Any]:
    """(scores [K], value) of one prompt: one full forward of prompt + candidate per action;
    the value from the last prompt token's final hidden state (of the first forward)."""
    import torch

    scores, hidden = [], None
    for candidate in candidates:
        ids = torch.tensor([prompt + candidate])
        # logits only where the candidate's tokens are predicted (not the whole prompt's)
        keep = len(candidate) + 1
        out = policy.model(input_ids=ids, output_hidden_states=True, logits_to_keep=keep)
        logprobs = torch.log_softmax(out.logits[0, :-1].float(), -1)  # [len(candidate), V]
        scores.append(logprobs[torch.arange(len(candidate)), torch.tensor(candidate)].sum())
        if hidden is None:
            hidden = out.hidden_states[-1][0, len(prompt) - 1]
    return torch.stack(scores), policy.heads["value"](hidden.float()).squeeze(-1)


def run_naive(args: argparse.Namespace, model: str) -> dict[str, float]:
    """The same PPO with one full forward per (env, action) and a full backward."""
    import torch

    from llmrl.learner.llm.model import LlmPolicyModel
    from llmrl.recipes.glam.llm_ppo import LlmPpoConfig, gae, ppo_loss
    from llmrl.recipes.glam.prompt import PromptHistory, action_phrases
    from llmrl.simulator.client import make_world
    from llmrl.simulator.world import episode_ends

    steps = args.naive_envs * args.num_steps * args.updates
    shared = settings(args, model)
    ppo = shared["ppo"] | {"num_envs": args.naive_envs, "lora_layers": None}
    config = LlmPpoConfig(**shared | {"total_timesteps": steps, "ppo": ppo})
    torch.set_num_threads(args.threads)
    torch.manual_seed(config.seed)
    policy = LlmPolicyModel.load(model, lora=True, lora_r=config.ppo.lora_r, bf16=False)
    policy.train()
    params = policy.parameters()
    optimizer = torch.optim.Adam(params, lr=config.ppo.learning_rate, eps=config.ppo.adam_eps)
    phrases = action_phrases(config.action_set)
    candidates = [policy.encode(" " + phrase) for phrase in phrases]
    generator = torch.Generator().manual_seed(config.seed)
    N, T = config.ppo.num_envs, config.ppo.num_steps
    world = make_world(args.env, N, config.seed)
    wanted = ["text", "mission", "reward", "discount", "step_type"]
    histories = [PromptHistory(phrases) for _ in range(N)]
    first = world.reset(seed=config.seed, observations=wanted)
    for i, history in enumerate(histories):
        history.start(str(first["mission"][i]), str(first["text"][i]))
    rollout_seconds = update_seconds = cpu = 0.0
    next_done = torch.zeros(N)
    for _update in range(config.num_updates):
        started, cpu_started = time.perf_counter(), time.process_time()
        prompts: list[list[int]] = []
        actions, logprobs = torch.zeros((T, N), dtype=torch.long), torch.zeros((T, N))
        rewards, dones, values = torch.zeros((T, N)), torch.zeros((T, N)), torch.zeros((T, N))
        for step in range(T):
            dones[step] = next_done
            with torch.no_grad():
                for i, history in enumerate(histories):
                    prompt = policy.encode(history.prompt())
                    prompts.append(prompt)
                    scores, values[step, i] = naive_scores(policy, prompt, candidates)
                    distribution = torch.distributions.Categorical(logits=scores)
                    actions[step, i] = torch.multinomial(distribution.probs, 1, generator=generator)
                    logprobs[step, i] = distribution.log_prob(actions[step, i])
            taken = [phrases[int(a)] for a in actions[step]]
            result = world.step(skill=taken, observations=wanted)
            terminated, truncated = episode_ends(result)
            rewards[step] = torch.as_tensor(result["reward"] * config.ppo.reward_scale)
            ended = terminated | truncated
            for i in range(N):
                histories[i].advance(taken[i], str(result["text"][i]))
            if ended.any():
                restarted = world.step(observations=wanted, active=ended)
                for i in np.flatnonzero(ended):
                    histories[i].start(str(restarted["mission"][i]), str(restarted["text"][i]))
            next_done = torch.as_tensor(ended, dtype=torch.float32)
        with torch.no_grad():  # the bootstrap value: one prompt forward per env
            next_value = torch.stack(
                [
                    naive_scores(policy, policy.encode(h.prompt()), candidates[:1])[1]
                    for h in histories
                ]
            )
        advantages, returns = gae(rewards, values, dones, next_value, next_done, config.ppo)
        rollout_seconds += time.perf_counter() - started
        cpu += time.process_time() - cpu_started
        print(f"naive rollout: {rollout_seconds:.1f} s so far", flush=True)

        started, cpu_started = time.perf_counter(), time.process_time()
        b_actions, b_logprobs = actions.reshape(-1), logprobs.reshape(-1)
        b_advantages, b_returns, b_values = (
            advantages.reshape(-1),
            returns.reshape(-1),
            values.reshape(-1),
        )
        for _epoch in range(config.ppo.update_epochs):
            order = np.random.default_rng(config.seed).permutation(config.ppo.batch_size)
            for begin in range(0, config.ppo.batch_size, config.ppo.minibatch_size):
                mb = torch.as_tensor(order[begin : begin + config.ppo.minibatch_size])
                adv = b_advantages[mb]
                adv = (adv - adv.mean()) / (adv.std() + 1e-8) if len(mb) > 1 else adv
                optimizer.zero_grad(set_to_none=True)
                for j, index in enumerate(mb.tolist()):  # one sample at a time
                    scores, value = naive_scores(policy, prompts[index], candidates)
                    loss, *_ = ppo_loss(
                        (scores.unsqueeze(0), value.unsqueeze(0)),
                        b_actions[index : index + 1],
                        b_logprobs[index : index + 1],
                        adv[j : j + 1],
                        b_returns[index : index + 1],
                        b_values[index : index + 1],
                        config.ppo,
                    )
                    (loss / len(mb)).backward()
                torch.nn.utils.clip_grad_norm_(params, config.ppo.max_grad_norm)
                optimizer.step()
        update_seconds += time.perf_counter() - started
        cpu += time.process_time() - cpu_started
    world.close()
    return {
        "rollout_seconds": rollout_seconds,
        "update_seconds": update_seconds,
        "cpu_seconds": cpu,
        "env_steps": config.ppo.batch_size * config.num_updates,
    }


def summary(figures: dict[str, float]) -> dict[str, float]:
    total = figures["rollout_seconds"] + figures["update_seconds"]
    return {
        **{k: round(v, 2) for k, v in figures.items()},
        "sps": round(figures["env_steps"] / total, 4),
        "cpu_seconds_per_step": round(figures["cpu_seconds"] / figures["env_steps"], 3),
        "rollout_share": round(figures["rollout_seconds"] / total, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    # the recipe's settings, from its config model (this bench's own defaults where noted);
    # --model also takes a model directory, or `tiny` (a tiny random Llama: a quick check)
    add_model_options(
        parser,
        GlamConfig,
        ["model", "env", "ppo.num_envs", "ppo.num_steps", "ppo.update_epochs",
         "ppo.minibatch_size", "ppo.lora_layers"],
        defaults={"ppo.num_steps": 1, "ppo.update_epochs": 1, "ppo.minibatch_size": 16,
                  "ppo.lora_layers": 4},
    )  # fmt: skip
    parser.add_argument("--updates", type=int, default=1, help="PPO updates per mode")
    parser.add_argument(
        "--naive-envs",
        type=int,
        default=16,
        help="naive: envs (it scores each env alone, so its steps/s do not depend on this)",
    )
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--modes", default="fast,naive", help="which modes, in order")
    args, _ = parse_model_options(parser, GlamConfig)  # each recipe setting checked

    with tempfile.TemporaryDirectory() as tmp:
        model = args.model
        if model == "tiny":
            import sys

            sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
            from support.tiny_llm import make_tiny_llama

            model = str(make_tiny_llama(Path(tmp) / "tiny"))
        figures = {}
        for mode in args.modes.split(","):
            if mode == "fast":
                figures[mode] = summary(run_fast(args, model, Path(tmp)))
            elif mode == "naive":
                figures[mode] = summary(run_naive(args, model))
            else:
                raise SystemExit(f"--modes: unknown mode {mode!r}; known: fast, naive")
            print(mode, figures[mode], flush=True)
    shown = {k: v for k, v in vars(args).items() if k != "modes" and not k.startswith("_")}
    report: dict[str, Any] = {"settings": shown}
    report.update(figures)
    if "fast" in figures and "naive" in figures:
        fast, naive = figures["fast"], figures["naive"]
        report["speedup_sps"] = round(fast["sps"] / naive["sps"], 2)
        report["speedup_cpu"] = round(
            naive["cpu_seconds_per_step"] / fast["cpu_seconds_per_step"], 2
        )
        per_step = {m: {k: f[k] / f["env_steps"] for k in ("rollout_seconds", "update_seconds")}
                    for m, f in figures.items()}  # fmt: skip
        for phase in ("rollout", "update"):
            key = f"{phase}_seconds"
            report[f"speedup_{phase}"] = round(per_step["naive"][key] / per_step["fast"][key], 2)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
