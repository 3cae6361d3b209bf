"""GRPO's training: TRL's `GRPOTrainer` with a `rollout_func` that plays BabyAI-Text episodes.

Why `rollout_func` and not `environment_factory`: TRL's `environment_factory` (0.29+) makes an
episode a chat whose turns go on only while the model emits *tool calls* in its chat
template's format, parsed by the tokenizer's response schema; an episode ends at the first
answer that is not a tool call. A 135M model (or the tests' random one) seldom writes a
well-formed tool call, so episodes would end after one turn, and BabyAI-Text's six phrases
would become six tools. `rollout_func` leaves the episode loop to us: every turn the policy
generates one action phrase (constrained to the legal ones, `llmrl.recipes.grpo.policy`), the
simulator steps, and the whole episode comes back to TRL as one sequence: `prompt_ids` (the
episode's prompt), `completion_ids` (every turn's phrase and the env's reply after it),
`logprobs`, and `env_mask` (1 on generated tokens, 0 on the env's, which TRL leaves out of the
loss). The episode's return is the extra field `episode_return` that the reward function
reads. TRL then does GRPO itself: the group advantages (`num_generations` = G episodes of the
same seed, so like is compared with like), the clipped loss and the optimizer step.

Episodes are played through llmrl's world client (`llmrl.simulator.client.make_world`):
in-process, or the simulator service over dm_env_rpc when `simulator` is set. Each episode of a
group has its own one-env world reset with the group's seed (a world of G envs would seed env i
with seed + i). Training seeds are `seed + i` (i < 10**6 in any real budget), the held-out
ones `seed + eval_seed_offset + i`.

The budget is in env steps (`total_timesteps`), as GLAM's: TRL's `max_steps` is an upper
bound (every episode one step) and a callback stops training once the rollouts have taken the
budget; the batch that reaches it has its episodes cut short so that the overshoot stays below
one step per episode of that batch. `env_steps` in the result is the count actually taken.

Every generated phrase is one LLM call of the run: its prompt tokens (the transcript so far)
and completion tokens are counted in the result and, when the gateway is in this process
(embedded mode), recorded in its ledger under the tag "grpo" (local, cost 0), so the
end-of-run summary counts them. A gateway service's ledger has no call to record tokens
computed elsewhere, so in service mode they are only in the result.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from llmrl.common.bounds import Frames, Seed

TAG = "grpo"
WANTED = ["text", "mission", "action_phrases", "reward", "discount", "step_type"]


class GrpoTrainingJob(BaseModel):
    """Everything needed to train one GRPO adapter; unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["grpo"] = "grpo"
    env: str
    model: str = Field(..., description="a local model directory or a hub id")
    out_dir: str = Field(..., description="where the adapter versions are saved")
    total_timesteps: Frames = Field(..., ge=1)
    group_size: int = Field(..., ge=2, le=1024)
    groups_per_step: int = Field(1, ge=1, le=1024)
    learning_rate: float = Field(..., gt=0, le=1)
    lora_r: int = Field(16, ge=1, le=1024)
    lora_layers: int | None = Field(2, ge=1, le=1024)
    beta: float = Field(0.0, ge=0, le=10_000)
    temperature: float = Field(1.0, gt=0, le=10_000)
    scale_rewards: Literal["group", "batch", "none"] = "group"
    checkpoint_every: int = Field(4, ge=1, le=10**7)
    max_steps: int | None = Field(None, ge=1, le=10**6)
    device: Literal["cpu", "cuda"] = "cpu"
    use_vllm: bool = False
    seed: Seed = 0
    run_id: str = ""
    tensorboard_dir: str | None = None
    simulator: str | None = None


class Rollouts:
    """TRL's `rollout_func`: plays each prompt row's episode, counts env steps and tokens."""

    def __init__(
        self,
        job: GrpoTrainingJob,
        tokenizer: Any,
        writer: Any = None,
        record_usage: Callable[[int, int, float], None] | None = None,
        on_progress: Callable[[int], None] | None = None,
    ) -> None:
        from llmrl.simulator.client import make_world

        self.job, self.tokenizer, self.writer = job, tokenizer, writer
        self.record_usage, self.on_progress = record_usage, on_progress
        self.worlds = [
            make_world(job.env, num_envs=1, seed=job.seed, address=job.simulator)
            for _ in range(job.group_size)
        ]
        self.env_steps = 0
        self.episodes = 0
        self.successes = 0
        self.calls = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0

    @property
    def spent(self) -> bool:
        return self.env_steps >= self.job.total_timesteps

    def close(self) -> None:
        for world in self.worlds:
            world.close()

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        import torch

        from llmrl.recipes.grpo.policy import PhrasePolicy

        model = trainer.accelerator.unwrap_model(trainer.model)
        generator = torch.Generator().manual_seed(self.job.seed * 7919 + self.episodes)
        out: dict[str, list[Any]] = {
            key: [] for key in ("prompt_ids", "completion_ids", "logprobs", "env_mask")
        }
        out["episode_return"] = []
        # rows come grouped: TRL repeats each prompt G times in a row (its RepeatSampler)
        for row, prompt in enumerate(prompts):
            seed = int(str(prompt).rsplit(" ", 1)[1])
            left = len(prompts) - row
            cap = max(1, math.ceil((self.job.total_timesteps - self.env_steps) / left))
            if self.job.max_steps is not None:
                cap = min(cap, self.job.max_steps)
            world = self.worlds[row % self.job.group_size]
            if self.job.use_vllm:
                policy: Any = VllmPhrasePolicy(trainer, self.tokenizer)
            else:
                policy = PhrasePolicy(
                    model,
                    self.tokenizer,
                    (),
                    greedy=False,
                    temperature=self.job.temperature,
                    generator=generator,
                )
            episode_return, transcript = self.play(world, seed, policy, cap)
            out["prompt_ids"].append(transcript.prompt_ids)
            out["completion_ids"].append(transcript.completion_ids)
            out["logprobs"].append(transcript.logprobs)
            out["env_mask"].append(transcript.mask)
            out["episode_return"].append(episode_return)
        return out

    def play(self, world: Any, seed: int, policy: Any, cap: int) -> tuple[float, Any]:
        """One episode of at most `cap` steps from `seed`: its return and its transcript."""
        from llmrl.recipes.glam.driver import env_phrases
        from llmrl.recipes.grpo.policy import PhraseTrie
        from llmrl.simulator.world import episode_ends

        # the env's phrases where it names them (BabyAI-Text's variants rename them)
        wanted = [n for n in WANTED if n != "action_phrases" or n in world.observation_space.spaces]
        obs = world.reset(seed=seed, observations=wanted)
        phrases = env_phrases({k: v[0] for k, v in obs.items() if k == "action_phrases"})
        policy.trie = PhraseTrie(self.tokenizer, phrases)
        policy.start(phrases, str(obs["mission"][0]), str(obs["text"][0]))
        total, steps, success = 0.0, 0, False
        while True:
            started = time.perf_counter()
            turn = policy.act()
            self.calls += 1
            self.prompt_tokens += turn.context_tokens
            self.completion_tokens += len(turn.tokens)
            if self.record_usage is not None:
                self.record_usage(
                    turn.context_tokens, len(turn.tokens), time.perf_counter() - started
                )
            result = world.step(skill=[turn.phrase], observations=wanted)
            steps += 1
            reward = float(result["reward"][0])
            total += reward
            terminated, truncated = episode_ends(result)
            if terminated[0] or truncated[0] or steps >= cap:
                success = bool(terminated[0]) and reward > 0
                break
            policy.observe(str(result["text"][0]))
        self.env_steps += steps
        self.episodes += 1
        self.successes += int(success)
        if self.on_progress is not None:
            self.on_progress(steps)
        if self.writer is not None:
            x = self.env_steps
            self.writer.add_scalar("charts/episodic_return", total, x)
            self.writer.add_scalar("charts/episodic_length", steps, x)
            self.writer.add_scalar("charts/success", float(success), x)
        return total, policy.transcript


class VllmPhrasePolicy:
    """The GPU path (use_vllm): each turn is generated by TRL's vLLM engine, its output held
    to " <phrase>\\n" by vLLM's structured outputs (the regex set in `grpo_arguments`), then
    parsed; a turn that still spells no legal phrase is played as the env's first phrase and
    the episode goes on (with vLLM's guided decoding it should not happen). Not run on a CPU:
    untested here."""

    def __init__(self, trainer: Any, tokenizer: Any) -> None:
        self.trainer, self.tokenizer = trainer, tokenizer
        self.trie: Any = None
        self.transcript: Any = None
        self._turns = 0

    def start(self, phrases: Any, mission: str, text: str) -> None:
        from llmrl.recipes.grpo.policy import Transcript, header

        ids = self.tokenizer.encode(header(phrases, mission, text), add_special_tokens=False)
        self.transcript, self._turns = Transcript(prompt_ids=list(ids)), 0

    def observe(self, text: str) -> None:
        from llmrl.recipes.grpo.policy import observation_chunk

        self._turns += 1
        chunk = observation_chunk(self._turns, text)
        self.transcript.add_env(self.tokenizer.encode(chunk, add_special_tokens=False))

    def act(self) -> Any:
        from llmrl.recipes.grpo.policy import Turn

        context = self.transcript.context()
        _, completions, logprobs, _ = self.trainer.vllm_generation.generate(
            prompts=[context], images=None, num_generations=1
        )
        tokens = list(completions[0])
        text = self.tokenizer.decode(tokens, skip_special_tokens=True).strip()
        phrase = text if text in self.trie.phrases else self.trie.phrases[0]
        turn = Turn(phrase, tokens, [float(lp[0]) for lp in logprobs[0]], len(context))
        self.transcript.add_generated(turn)
        return turn


def episode_return_reward(completions: list[Any], **kwargs: Any) -> list[float]:
    """GRPO's reward: the episode's return, which the rollout passed as an extra field."""
    return [float(r) for r in kwargs["episode_return"]]


def gateway_usage_recorder(run_id: str) -> Callable[[int, int, float], None] | None:
    """Records one local generation in the in-process gateway's ledger (embedded mode), or None
    where the gateway is not in this process."""
    from llmrl.llm_gateway.client import InProcessClient, connect

    client = connect()
    if not run_id or not isinstance(client, InProcessClient):
        return None
    ledger = client.gateway.ledger

    def record(prompt_tokens: int, completion_tokens: int, latency_s: float) -> None:
        ledger.record(
            run_id,
            TAG,
            cached=False,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cost_usd=0.0,
            latency_s=latency_s,
        )

    return record


def grpo_arguments(job: GrpoTrainingJob, out_dir: Path, bf16: bool, phrases: Any) -> Any:
    """TRL's GRPOConfig for the job: one generation of `groups_per_step` groups per optimizer
    step, no reuse of a batch (num_iterations 1), TRL's loss and advantages as they are."""
    from trl import GRPOConfig

    batch = job.group_size * job.groups_per_step
    # an upper bound on the optimizer steps: every episode at least one env step
    upper = max(1, math.ceil(job.total_timesteps / batch))
    extra: dict[str, Any] = {}
    if job.use_vllm:
        alternatives = "|".join(phrases)
        extra = {
            "vllm_mode": "colocate",
            "vllm_structured_outputs_regex": f" ({alternatives})\n",
            "max_completion_length": 16,
        }
    return GRPOConfig(
        output_dir=str(out_dir / "trainer"),
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=1,
        num_generations=job.group_size,
        max_steps=upper,
        learning_rate=job.learning_rate,
        beta=job.beta,
        temperature=job.temperature,
        scale_rewards=job.scale_rewards,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        shuffle_dataset=False,
        use_cpu=job.device == "cpu",
        bf16=bf16,
        seed=job.seed,
        use_vllm=job.use_vllm,
        disable_tqdm=True,
        **extra,
    )


def train_grpo(
    job: GrpoTrainingJob, on_progress: Callable[[int], None] | None = None
) -> dict[str, Any]:
    """GRPO on the job's env until `total_timesteps` env steps; an adapter version (PEFT
    directory) every `checkpoint_every` steps and at the end. Returns the points (version
    directory, step, env steps), the losses TRL logged, the rollouts' counts, CPU time."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOTrainer

    from llmrl.common.devices import resolve_device
    from llmrl.common.numerics import computes_bf16
    from llmrl.learner.llm.lora import top_layers
    from llmrl.learner.llm.model import LLAMA_LINEAR_LAYERS

    out_dir = Path(job.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    bf16 = computes_bf16(job.device)  # the project's precision ($LLMRL_PRECISION), stated
    resolve_device(job.device)  # TRL places the model itself; on a GPU this pins its numerics
    dtype = torch.bfloat16 if bf16 else torch.float32
    tokenizer = AutoTokenizer.from_pretrained(job.model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"  # TRL's requirement
    model = AutoModelForCausalLM.from_pretrained(job.model, dtype=dtype)
    lora = LoraConfig(
        r=job.lora_r,
        lora_alpha=2 * job.lora_r,
        lora_dropout=0.0,
        target_modules=list(LLAMA_LINEAR_LAYERS),
        layers_to_transform=top_layers(model, job.lora_layers),
        task_type="CAUSAL_LM",
    )
    writer = None
    if job.tensorboard_dir:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(job.tensorboard_dir)
    rollouts = Rollouts(job, tokenizer, writer, gateway_usage_recorder(job.run_id), on_progress)
    batch = job.group_size * job.groups_per_step
    upper = max(1, math.ceil(job.total_timesteps / batch))
    # one row per group: the seed; TRL repeats each row G times (the group's episodes)
    seeds = [job.seed + i for i in range(upper * job.groups_per_step)]
    dataset = Dataset.from_dict({"prompt": [f"seed {s}" for s in seeds]})
    from llmrl.recipes.glam.prompt import action_phrases

    args = grpo_arguments(job, out_dir, bf16, action_phrases("babyai"))
    points: list[dict[str, Any]] = []
    losses: list[dict[str, float]] = []

    class Progress(TrainerCallback):  # type: ignore[misc]
        """Logs TRL's figures to TensorBoard, saves versions, stops at the env-step budget."""

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if not logs or "loss" not in logs:
                return
            losses.append({"step": state.global_step, "env_steps": rollouts.env_steps, **logs})
            if writer is None:
                return
            for key, value in logs.items():
                if not isinstance(value, int | float):
                    continue
                group = "losses" if key in ("loss", "kl", "entropy", "grad_norm") else "charts"
                name = key.replace("/", "_")
                writer.add_scalar(f"{group}/{name}", float(value), rollouts.env_steps)

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if rollouts.spent:
                control.should_training_stop = True
            if rollouts.spent or state.global_step % job.checkpoint_every == 0:
                save(state.global_step)

    def save(step: int) -> None:
        if points and points[-1]["update"] == step:
            return
        from llmrl.learner.versions import save_version

        path = out_dir / f"v{step:05d}"
        # a version with recorded metadata: the only kind a policy spec may name for loading
        result = {"update": step, "global_step": rollouts.env_steps}
        save_version(
            path, lambda folder: trainer.model.save_pretrained(str(folder)), TAG, result=result
        )
        points.append({"adapter": str(path), **result})

    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[episode_return_reward],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora,
        rollout_func=rollouts,
        callbacks=[Progress()],
    )
    cpu_started = time.process_time()
    wall_started = time.perf_counter()
    try:
        trainer.train()
        save(trainer.state.global_step)
    finally:
        rollouts.close()
        if writer is not None:
            writer.flush()
            writer.close()
    return {
        **points[-1],
        "points": points,
        "env_steps": rollouts.env_steps,
        "episodes": rollouts.episodes,
        "train_success_rate": rollouts.successes / max(1, rollouts.episodes),
        "llm_calls": rollouts.calls,
        "prompt_tokens": rollouts.prompt_tokens,
        "completion_tokens": rollouts.completion_tokens,
        "losses": losses,
        "cpu_minutes": (time.process_time() - cpu_started) / 60,
        "wall_minutes": (time.perf_counter() - wall_started) / 60,
        "dtype": "bfloat16" if bf16 else "float32",
        "threads": torch.get_num_threads(),
    }
