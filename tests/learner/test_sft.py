"""LoRA SFT on chat JSONL: loss only on the answer, the loss falls, and the gateway serves the
new adapter version (written while it runs) with different outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.tiny_llm import tiny_gateway_settings

from llmrl.common.chat_format import write_chat_jsonl
from llmrl.learner.adapters import adapter_dir
from llmrl.learner.algorithms.sft import (
    ADAPTER_METADATA,
    SftConfig,
    read_chat_examples,
    tokenize_chat,
    train_lora_sft,
)
from llmrl.llm_gateway.client import connect

PROMPT = [
    {"role": "system", "content": "You are a household robot."},
    {"role": "user", "content": "Example context"},
    {"role": "assistant", "content": "1. go to room kitchen_0", "weight": 0},
]
ANSWERS = ["1. pick up mug_1\n2. go to sink_1", "1. go to room bedroom_0", "mission complete"]


def examples() -> list[list[dict]]:
    return [
        [*PROMPT, {"role": "user", "content": f"Context {i}. What is your plan?"},
         {"role": "assistant", "content": ANSWERS[i % len(ANSWERS)]}]
        for i in range(6)
    ]  # fmt: skip


def test_only_trained_assistant_turns_carry_labels(tiny_model_dir: Path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    ids, labels = tokenize_chat(tokenizer, examples()[0])
    assert len(ids) == len(labels)
    labelled = tokenizer.decode([t for t, label in zip(ids, labels, strict=True) if label != -100])
    assert labelled == ANSWERS[0] + "<|im_end|>\n"  # not the weight-0 few-shot answer
    # the ids are the generation prompt the gateway sends, then the answer
    prompt = tokenizer.apply_chat_template(
        [{k: m[k] for k in ("role", "content")} for m in examples()[0][:-1]],
        add_generation_prompt=True,
        tokenize=False,
    )
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    assert ids[: len(prompt_ids)] == prompt_ids


def test_sft_lowers_the_loss_and_the_gateway_serves_the_new_version(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch
):
    monkeypatch.setenv("LLMRL_HOME", str(tmp_path / "home"))
    data = tmp_path / "train.jsonl"
    assert write_chat_jsonl(data, examples()) == 6
    llm = connect(**tiny_gateway_settings(tiny_model_dir))  # running before the adapter exists
    question = examples()[0][:-1]
    question = [{k: m[k] for k in ("role", "content")} for m in question]
    base = llm.score(question, [ANSWERS[0]], model="tiny")
    base_text = llm.chat(question, model="tiny", max_tokens=8).texts[0]

    target = adapter_dir("tiny", "mine", 1)
    result = train_lora_sft(
        SftConfig(
            data=str(data), base_model=str(tiny_model_dir), out_dir=str(target),
            steps=25, batch_size=3, learning_rate=1e-2, lora_r=8, bf16=False,
        )
    )  # fmt: skip
    assert result.examples == 6 and result.steps == 25
    assert sum(result.losses[-5:]) / 5 < result.losses[0] - 0.5
    assert (target / "adapter_config.json").exists()
    assert json.loads((target / ADAPTER_METADATA).read_text())["result"]["steps"] == 25

    tuned = llm.score(question, [ANSWERS[0]], model="tiny:mine@1")
    assert tuned.logprobs[0] > base.logprobs[0] + 1.0
    assert llm.chat(question, model="tiny:mine@1", max_tokens=8).texts[0] != base_text
    # the base model is still served as it was, beside the adapter
    again = llm.score(question, [ANSWERS[0]], model="tiny").logprobs[0]
    assert again == pytest.approx(base.logprobs[0], abs=1e-3)  # (peft's disabled path: fp noise)
    llm.close()


def test_training_continues_from_a_previous_version(tiny_model_dir: Path, tmp_path: Path):
    data = tmp_path / "train.jsonl"
    write_chat_jsonl(data, examples())
    common = dict(data=str(data), base_model=str(tiny_model_dir), batch_size=3,
                  learning_rate=1e-2, lora_r=8, bf16=False)  # fmt: skip
    first = train_lora_sft(SftConfig(out_dir=str(tmp_path / "v1"), steps=15, **common))
    second = train_lora_sft(
        SftConfig(
            out_dir=str(tmp_path / "v2"), steps=3, init_adapter=str(tmp_path / "v1"), **common
        )
    )
    assert second.losses[0] < first.losses[0] - 0.5  # it starts where version 1 ended


def test_gradient_checkpointing_trains_the_same_adapter(tiny_model_dir: Path, tmp_path: Path):
    """Recomputing activations in the backward pass saves memory and changes no result."""
    data = tmp_path / "train.jsonl"
    write_chat_jsonl(data, examples())
    common = dict(data=str(data), base_model=str(tiny_model_dir), batch_size=3, steps=6,
                  learning_rate=1e-2, lora_r=8, bf16=False, seed=3)  # fmt: skip
    kept = train_lora_sft(
        SftConfig(out_dir=str(tmp_path / "kept"), gradient_checkpointing=False, **common)
    )
    recomputed = train_lora_sft(
        SftConfig(out_dir=str(tmp_path / "recomputed"), gradient_checkpointing=True, **common)
    )
    assert recomputed.losses == pytest.approx(kept.losses, rel=1e-4, abs=1e-5)
    assert recomputed.losses[-1] < recomputed.losses[0]  # and it trains


def test_lora_on_the_top_layers_only(tiny_model_dir: Path, tmp_path: Path):
    from safetensors.torch import load_file

    data = tmp_path / "train.jsonl"
    write_chat_jsonl(data, examples())
    common = dict(data=str(data), base_model=str(tiny_model_dir), batch_size=3, steps=8,
                  learning_rate=1e-2, lora_r=8, bf16=False)  # fmt: skip
    result = train_lora_sft(SftConfig(out_dir=str(tmp_path / "top"), lora_layers=1, **common))
    weights = load_file(str(tmp_path / "top" / "adapter_model.safetensors"))
    assert weights and all(".layers.1." in name for name in weights)  # the tiny model has 2
    assert result.losses[-1] < result.losses[0]
    with pytest.raises(ValueError, match=r"lora_layers must be in \[1, 2\]"):
        train_lora_sft(SftConfig(out_dir=str(tmp_path / "bad"), lora_layers=3, **common))


def test_a_line_that_is_not_json_is_named_by_file_and_line(tmp_path: Path):
    data = tmp_path / "train.jsonl"
    write_chat_jsonl(data, examples()[:1])
    with data.open("a") as handle:
        handle.write('{"messages": [\n')
    with pytest.raises(ValueError, match=r"train\.jsonl line 2: not JSON"):
        read_chat_examples(str(data))


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"learning_rate": 0}, "learning_rate: Input should be greater than 0"),
        ({"learning_rate": float("nan")}, "learning_rate: Input should be a finite number"),
        ({"epochs": float("inf")}, "epochs: Input should be a finite number"),
        ({"batch_size": 2.0}, "batch_size: Input should be a valid integer"),
        ({"steps": -1}, "steps: "),
        ({"lora_dropout": 1.0}, "lora_dropout: Input should be less than 1"),
        ({"target_modules": []}, "target_modules: "),
        ({"bf16": "no"}, "bf16: Input should be a valid boolean"),
        ({"device": "gpu"}, "device: expected auto"),
        ({"out_dir": "x"}, "out_dir: unknown setting; allowed: base_model, "),  # the line's
    ],
)
def test_a_bad_setting_is_refused_naming_it_before_anything_loads(tmp_path, settings, named):
    from llmrl.common.registry import registry

    with pytest.raises(ValueError, match=f"^sft: {named}"):
        registry.get_algorithm("sft").train(
            str(tmp_path / "missing.jsonl"), tmp_path / "line", base_model="/nonexistent",
            **settings,
        )  # fmt: skip
    assert not (tmp_path / "line").exists()
