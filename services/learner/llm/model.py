"""The model holder: a causal LM to train as a policy, its LoRA (or not), and named heads.

    policy = LlmPolicyModel.load("smollm2", lora_layers=8, value_hidden=1024)
    scores = score_candidates(policy, prompts, candidates)          # llmrl.learner.llm.scorer
    values = policy.heads["value"](scores.hidden).squeeze(-1)

`base_model` is a local HF directory or a gateway model name (its `path`, builtins resolved,
as the gateway serves it). The model and its heads sit on `device` (`auto`: the GPU where torch
sees one; `llmrl.common.devices`). The weights stay fp32; `autocast()` runs the forward in bf16
where that device computes bf16 natively (a GPU, AVX512-BF16 or AMX), since emulated bf16 is
slower on other CPUs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmrl.learner.llm.lora import LLAMA_LINEAR_LAYERS, top_layers

# every linear layer of a Llama-family block (SmolLM2 is one): attention and MLP
HEADS_FILE = "heads.pt"  # the heads' weights, beside the adapter (or the full model)


def resolve_base_model(base_model: str) -> Path:
    """A local model directory, or the directory of gateway model `base_model`."""
    path = Path(base_model).expanduser()
    if path.is_dir():
        return path
    from llmrl.learner.adapters import base_model_dir

    try:
        return base_model_dir(base_model)
    except (KeyError, ValueError) as exc:
        raise ValueError(
            f"base_model: {base_model!r} is neither a local model directory nor a gateway "
            f"model served from local weights ({exc})"
        ) from None


def value_head(hidden_size: int, width: int = 1024) -> Any:
    """GLAM's value head: MLP width-sigmoid-width-sigmoid-1 on a hidden state."""
    from torch import nn

    return nn.Sequential(
        nn.Linear(hidden_size, width),
        nn.Sigmoid(),
        nn.Linear(width, width),
        nn.Sigmoid(),
        nn.Linear(width, 1),
    )


@dataclass
class LlmPolicyModel:
    """A causal LM (peft-wrapped when `lora`), its tokenizer and its heads (a ModuleDict)."""

    model: Any
    tokenizer: Any
    heads: Any
    lora: bool
    bf16: bool
    base_model: str

    @classmethod
    def load(
        cls,
        base_model: str,
        *,
        lora: bool = True,
        lora_r: int = 16,
        lora_alpha: int | None = None,
        lora_dropout: float = 0.0,
        lora_layers: int | None = None,
        target_modules: Sequence[str] = LLAMA_LINEAR_LAYERS,
        value_hidden: int = 1024,
        bf16: bool | None = None,
        init_from: str | Path | None = None,
        random_init: bool = False,
        device: str = "auto",
    ) -> LlmPolicyModel:
        """The base model with a fresh LoRA (or trainable whole, `lora=False`) and a fresh
        value head; `init_from`: a checkpoint directory `save` wrote, to continue from.
        `random_init`: the base model's architecture with fresh random weights instead of
        its pretrained ones (GLAM's NPAE baseline; ignored when continuing a checkpoint).
        `bf16` None: the process's precision ($LLMRL_PRECISION, `llmrl.common.numerics`)."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from llmrl.common.devices import resolve_device
        from llmrl.common.numerics import computes_bf16

        where = resolve_device(device)
        directory = resolve_base_model(base_model)
        tokenizer = AutoTokenizer.from_pretrained(directory)
        full_dir = Path(init_from) if init_from and not lora else directory
        if random_init and not init_from:
            from transformers import AutoConfig

            config = AutoConfig.from_pretrained(directory)
            model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        else:
            model = AutoModelForCausalLM.from_pretrained(full_dir, dtype=torch.float32)
        if lora:
            from peft import LoraConfig, PeftModel, get_peft_model

            if init_from:
                model = PeftModel.from_pretrained(model, str(init_from), is_trainable=True)
            else:
                config = LoraConfig(
                    r=lora_r,
                    lora_alpha=lora_alpha or 2 * lora_r,
                    lora_dropout=lora_dropout,
                    target_modules=list(target_modules),
                    layers_to_transform=top_layers(model, lora_layers),
                    task_type="CAUSAL_LM",
                )
                model = get_peft_model(model, config)
        heads = torch.nn.ModuleDict({"value": value_head(model.config.hidden_size, value_hidden)})
        if init_from:
            saved = torch.load(Path(init_from) / HEADS_FILE, map_location="cpu", weights_only=True)
            heads.load_state_dict(saved)
        return cls(
            model=model.to(where),
            tokenizer=tokenizer,
            heads=heads.to(where),
            lora=lora,
            bf16=computes_bf16(where) if bf16 is None else bf16,
            base_model=str(directory),
        )

    @property
    def pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return int(pad if pad is not None else self.tokenizer.eos_token_id or 0)

    @property
    def device(self) -> Any:
        return next(self.model.parameters()).device

    @property
    def frozen_layers(self) -> int:
        """How many bottom decoder layers (and the embeddings below them) train nothing: their
        outputs never change during training (LoRA on the top layers only), so the scorer can
        keep them (`keep_frozen`). 0 when the embeddings or the first layer train."""
        base = self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model
        decoder = base.get_decoder()
        if any(p.requires_grad for p in decoder.embed_tokens.parameters()):
            return 0
        count = 0
        for layer in decoder.layers:
            if any(p.requires_grad for p in layer.parameters()):
                break
            count += 1
        return count

    def parameters(self) -> list[Any]:
        """What the optimizer trains: the LoRA (or every weight) and the heads."""
        return [p for p in self.model.parameters() if p.requires_grad] + list(
            self.heads.parameters()
        )

    def train(self, mode: bool = True) -> LlmPolicyModel:
        self.model.train(mode)
        self.heads.train(mode)
        return self

    @contextlib.contextmanager
    def autocast(self) -> Iterator[None]:
        import torch

        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            yield

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def save(self, directory: Path) -> None:
        """The adapter (LoRA: what the gateway serves) or the whole model, and the heads."""
        import torch

        self.model.save_pretrained(directory)
        if not self.lora:
            self.tokenizer.save_pretrained(directory)
        torch.save(self.heads.state_dict(), directory / HEADS_FILE)
