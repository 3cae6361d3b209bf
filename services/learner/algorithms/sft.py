"""Supervised fine-tuning (SFT) of a local causal LM with LoRA, on OpenAI chat fine-tuning JSONL.

Registered as the algorithm `sft`: it learns from a dataset (`source`: chat JSONL file(s)) and
saves each version as a LoRA adapter (`llmrl.learner.adapters`), which the LLM gateway serves
as `<model>:<adapter>@<version>` when the line is `adapter_versions(model, adapter)`.

The loop reads top to bottom: load the base model and tokenizer from a local directory,
wrap the model in a peft LoRA (fresh, or continuing a previous adapter version), tokenize
each chat example with the model's chat template so that the loss only falls on the
assistant's tokens, then AdamW over shuffled mini-batches with bf16 autocast on CPU, and
save the adapter as a new version directory.

TRL's SFTTrainer is not used: this loop is short, and the prompt/target split must be the
exact one the gateway uses at inference (chat template with the generation prompt, then the
answer and the end-of-turn token).

    sft = registry.get_algorithm("sft")
    checkpoint = sft.train("train.jsonl", adapter_versions("smollm2", "mine"),
                           base_model=str(base_model_dir("smollm2")), steps=50)
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any, NamedTuple

from pydantic import Field

from llmrl.common.bounds import LearningRate, LlmBatch, LoraRank, Tokens, limit
from llmrl.common.devices import Device, device_field
from llmrl.common.numerics import adam_options, computes_bf16
from llmrl.common.registry import registry
from llmrl.learner.adapters import save_adapter
from llmrl.learner.algorithms.base import (
    Algorithm,
    AlgorithmSettings,
    Progress,
    validate_settings,
)
from llmrl.learner.llm.lora import LLAMA_LINEAR_LAYERS, top_layers
from llmrl.learner.versions import METADATA_FILE, Checkpoint, Versions, as_versions, find_checkpoint

log = logging.getLogger("llmrl.learner.sft")
SFT = "sft"  # the registered name
IGNORE_INDEX = -100  # label of tokens that carry no loss (prompt, padding)
ADAPTER_METADATA = METADATA_FILE  # every checkpoint's metadata file, adapters' too


class SftSettings(AlgorithmSettings):
    """Every setting of `sft`, with its description and bounds (a bad or unknown one is a
    ValueError naming it: `validate_settings`)."""

    base_model: str = Field(
        description="a local HF model directory, e.g. llmrl.learner.adapters.base_model_dir(name)"
    )
    init_adapter: str | None = Field(
        None, description="continue training this adapter directory (None: a fresh LoRA)"
    )
    steps: Annotated[int | None, limit("updates")] = Field(
        None, gt=0, description="optimizer steps (None: `epochs` passes over the data)"
    )
    epochs: Annotated[float, limit("epochs")] = Field(
        1.0, gt=0, description="passes over the data when steps is None"
    )
    batch_size: LlmBatch = Field(4, gt=0, description="examples per optimizer step")
    learning_rate: LearningRate = Field(2e-4, gt=0, description="AdamW learning rate of the LoRA")
    lora_r: LoraRank = Field(16, gt=0, description="LoRA rank")
    lora_alpha: Annotated[int | None, limit("coefficient")] = Field(
        None, gt=0, description="LoRA alpha (None: 2 x rank)"
    )
    lora_dropout: float = Field(0.05, ge=0, lt=1, description="LoRA dropout")
    target_modules: list[str] = Field(
        default_factory=lambda: list(LLAMA_LINEAR_LAYERS),
        min_length=1,
        strict=False,  # a tuple of names is a list too
        description="module names LoRA adapts (default: every linear layer of a Llama block)",
    )
    # backward stops at the lowest adapted layer and nothing below it is kept (SmolLM2, top 8
    # of 30: 0.71x step time, 0.40x memory)
    lora_layers: Annotated[int | None, limit("layers")] = Field(
        None, gt=0, description="adapt only the top N decoder layers (None: all)"
    )
    max_length: Tokens = Field(
        1024, gt=0, description="examples longer (in tokens) are dropped (counted in the result)"
    )
    # the weights stay fp32. Measured on an AVX2-only CPU: a tiny-model step is ~3x slower with
    # bf16 (emulated)
    bf16: bool | None = Field(
        None,
        description="bf16 autocast (None: the process's precision, $LLMRL_PRECISION: float32 "
        "unless set)",
    )
    # on long Housekeep contexts (~1.5k tokens, batch 4) SmolLM2's kept attention maps alone
    # take >10 GB
    gradient_checkpointing: bool = Field(
        True,
        description="recompute each layer's activations in the backward pass instead of "
        "keeping them",
    )
    seed: int = Field(0, ge=0, description="seed of the shuffling and the LoRA's initialisation")
    torch_threads: int | None = Field(
        None, gt=0, description="torch CPU threads (None: torch's default)"
    )
    device: Device = device_field("trains")


class SftConfig(SftSettings):
    """One SFT run: the settings, the data and where the adapter goes."""

    data: str | list[str] = Field(description="chat fine-tuning JSONL file(s)")
    out_dir: str = Field(description="the adapter version directory to write")


@dataclass
class SftResult:
    adapter_dir: str
    steps: int
    examples: int
    dropped_too_long: int
    losses: list[float]  # mean loss of each optimizer step
    seconds: float

    @property
    def first_loss(self) -> float:
        return self.losses[0] if self.losses else math.nan

    @property
    def last_loss(self) -> float:
        return self.losses[-1] if self.losses else math.nan

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "first_loss": self.first_loss, "last_loss": self.last_loss}


# -- data ---------------------------------------------------------------------------------------
def read_chat_examples(paths: str | list[str]) -> list[list[dict[str, Any]]]:
    """Message lists of chat fine-tuning JSONL file(s), checked (ValueError names the line)."""
    from llmrl.common.chat_format import chat_example_errors

    examples = []
    for path in [paths] if isinstance(paths, str) else paths:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    example = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path} line {number}: not JSON ({exc.msg})") from None
                errors = chat_example_errors(example)
                if errors:
                    raise ValueError(f"{path} line {number}: {'; '.join(errors)}")
                examples.append(example["messages"])
    return examples


def tokenize_chat(tokenizer: Any, messages: list[dict[str, Any]]) -> tuple[list[int], list[int]]:
    """(input ids, labels) of one conversation; labels are IGNORE_INDEX except on the
    assistant turns that are trained (all of them, unless marked `"weight": 0`).

    Each assistant turn's target is what the chat template adds after the prompt that ends
    with the generation prompt: the answer and the end-of-turn marker. Pieces are tokenized
    separately, exactly as the gateway encodes a prompt and then generates.
    """
    ids: list[int] = []
    labels: list[int] = []
    rendered = ""
    plain = [{"role": m["role"], "content": m["content"]} for m in messages]
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        prompt = tokenizer.apply_chat_template(
            plain[:i], add_generation_prompt=True, tokenize=False
        )
        full = tokenizer.apply_chat_template(plain[: i + 1], tokenize=False)
        if not prompt.startswith(rendered) or not full.startswith(prompt):
            raise ValueError("the chat template does not extend prompts turn by turn")
        context = tokenizer(prompt[len(rendered) :], add_special_tokens=False)["input_ids"]
        target = tokenizer(full[len(prompt) :], add_special_tokens=False)["input_ids"]
        trained = message.get("weight", 1) != 0
        ids += context + target
        labels += [IGNORE_INDEX] * len(context) + (
            target if trained else [IGNORE_INDEX] * len(target)
        )
        rendered = full
    return ids, labels


# -- training ------------------------------------------------------------------------------------
def optimizer_steps(examples: int, batch_size: int, epochs: float, steps: int | None) -> int:
    """Steps a run takes: `steps` when given, else `epochs` passes of batches (at least 1)."""
    return steps or max(1, math.ceil(epochs * math.ceil(examples / batch_size)))


def train_lora_sft(config: SftConfig, on_step: Callable[[int], None] | None = None) -> SftResult:
    """Fine-tune a LoRA adapter on chat data and save it to `config.out_dir` (atomically).
    `on_step(1)` is called after every optimiser step (a job's progress)."""
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from llmrl.common.devices import resolve_device

    started = time.perf_counter()
    if config.torch_threads:
        torch.set_num_threads(config.torch_threads)
    random.seed(config.seed)
    torch.manual_seed(config.seed)

    # 1. model, tokenizer and LoRA
    device = resolve_device(config.device)
    tokenizer = AutoTokenizer.from_pretrained(config.base_model)
    model = AutoModelForCausalLM.from_pretrained(config.base_model, dtype=torch.float32)
    if config.init_adapter:
        model = PeftModel.from_pretrained(model, config.init_adapter, is_trainable=True)
    else:
        lora = LoraConfig(
            r=config.lora_r,
            lora_alpha=config.lora_alpha or 2 * config.lora_r,
            lora_dropout=config.lora_dropout,
            target_modules=list(config.target_modules),
            layers_to_transform=top_layers(model, config.lora_layers),
            task_type="CAUSAL_LM",
        )
        model = get_peft_model(model, lora)
    model.to(device)
    if config.gradient_checkpointing:
        # non-reentrant: gradients reach the LoRA weights although the frozen inputs need none
        model.activation_checkpointing_enable(
            activation_checkpointing_kwargs={"use_reentrant": False}
        )
        model.config.use_cache = False
    model.train()
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0

    # 2. data: loss on assistant tokens only
    rows, dropped = [], 0
    for messages in read_chat_examples(config.data):
        ids, labels = tokenize_chat(tokenizer, messages)
        if len(ids) > config.max_length:
            dropped += 1
            continue
        rows.append((ids, labels))
    if not rows:
        raise ValueError(
            f"no training examples in {config.data} (dropped {dropped} longer than "
            f"max_length={config.max_length} tokens)"
        )
    total_steps = optimizer_steps(len(rows), config.batch_size, config.epochs, config.steps)

    # 3. the loop
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(
        params, lr=config.learning_rate, weight_decay=0.0, **adam_options()
    )
    order: list[int] = []
    losses: list[float] = []
    use_bf16 = computes_bf16(device) if config.bf16 is None else config.bf16
    for step in range(total_steps):
        if len(order) < config.batch_size:  # next epoch: a fresh shuffle
            fresh = list(range(len(rows)))
            random.shuffle(fresh)
            order += fresh
        batch = [rows[i] for i in order[: config.batch_size]]
        del order[: config.batch_size]
        input_ids, labels, mask = _collate(batch, pad_id)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_bf16):
            loss = assistant_loss(model, input_ids.to(device), labels.to(device), mask.to(device))
        optimizer.zero_grad(set_to_none=True)
        loss.float().backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        losses.append(float(loss.detach()))
        log.debug("sft step %d/%d loss %.4f", step + 1, total_steps, losses[-1])
        if on_step is not None:
            on_step(1)

    # 4. save the adapter version (beside the target, then renamed: never half a directory)
    result = SftResult(
        adapter_dir=str(config.out_dir),
        steps=total_steps,
        examples=len(rows),
        dropped_too_long=dropped,
        losses=losses,
        seconds=time.perf_counter() - started,
    )
    save_adapter(model, config.out_dir, SFT, config=config.model_dump(), result=result.to_dict())
    return result


def assistant_loss(model: Any, input_ids: Any, labels: Any, mask: Any) -> Any:
    """Mean next-token cross-entropy over the labelled (assistant) tokens.

    The output layer is applied only where a label is, not to the whole prompt: with a
    49k-token vocabulary and prompts 10x longer than the answers, the full logits would
    dominate the step's time and memory.
    """
    import torch

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    hidden = base.get_decoder()(input_ids=input_ids, attention_mask=mask).last_hidden_state
    targets = labels[:, 1:]
    keep = targets != IGNORE_INDEX
    logits = base.get_output_embeddings()(hidden[:, :-1][keep])
    return torch.nn.functional.cross_entropy(logits.float(), targets[keep])


def _collate(batch: list[tuple[list[int], list[int]]], pad_id: int) -> tuple[Any, Any, Any]:
    """Right-padded input ids, labels and attention mask."""
    import torch

    width = max(len(ids) for ids, _ in batch)
    input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), IGNORE_INDEX, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for i, (ids, labs) in enumerate(batch):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        labels[i, : len(labs)] = torch.tensor(labs)
        mask[i, : len(ids)] = 1
    return input_ids, labels, mask


# -- the registered algorithm ----------------------------------------------------------------
class TunedModel(NamedTuple):
    model: Any  # the base model with the adapter (peft), in eval mode
    tokenizer: Any


class LoraSft(Algorithm):
    """LoRA SFT on chat JSONL. Settings: `SftSettings`' fields; `base_model` (a local model
    directory) is required."""

    settings_model = SftSettings

    name = SFT
    family = "sft"
    learns_from = "dataset"

    def train(
        self,
        source: str | list[str],
        checkpoints: Versions | str | Path,
        *,
        version: str | int | None = None,
        on_progress: Progress | None = None,
        **settings: Any,
    ) -> Checkpoint:
        checked = validate_settings(SFT, SftSettings, settings)
        line = as_versions(checkpoints)
        target = line.path(line.next_version() if version is None else version)
        run = {**checked.model_dump(), "data": source, "out_dir": str(target)}
        train_lora_sft(validate_settings(SFT, SftConfig, run), on_progress)
        return Checkpoint.read(target)

    def load(self, checkpoint: Checkpoint | str | Path) -> TunedModel:
        """The base model the adapter was trained on, with the adapter, and its tokenizer."""
        from peft import PeftModel
        from transformers import AutoModelForCausalLM, AutoTokenizer

        found = find_checkpoint(checkpoint)
        self.check_written_by_me(found)
        base = found.config.get("base_model")
        if not base:
            raise ValueError(f"checkpoint {found.path}: its metadata names no base_model")
        model = AutoModelForCausalLM.from_pretrained(base)
        model = PeftModel.from_pretrained(model, str(found.path)).eval()
        return TunedModel(model, AutoTokenizer.from_pretrained(base))


registry.register_algorithm(
    SFT, "LoRA supervised fine-tuning on chat JSONL", family="sft", learns_from="dataset"
)(LoraSft())
