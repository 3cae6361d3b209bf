"""The local transformers backend: scoring equals a plain forward pass (prompt KV computed
once, several requests coalesced), batched generation equals one-at-a-time generation, and
LoRA adapters are swapped by name and version without reloading the base model."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from llmrl.llm_gateway.api_types import GenerateRequest, ScoreRequest
from llmrl.llm_gateway.errors import InvalidRequestError

PROMPTS = [
    "You are in a room with a red key.",
    "The door is locked. Your mission: open the yellow door and go through it.",
    "Hi.",
]
CANDIDATES = [" go to the red key", " open the door", " toggle", " pick up the key and leave"]


def plain_forward_logprobs(backend, prompt: str, candidate: str) -> list[float]:
    """Reference: one forward pass over prompt + candidate, no cache, no padding."""
    lm = backend.lm
    prompt_ids, candidate_ids = lm.encode(prompt), lm.encode(candidate)
    ids = torch.tensor([prompt_ids + candidate_ids])
    with torch.no_grad():
        logprobs = torch.log_softmax(lm.model(ids).logits.float(), dim=-1)[0]
    start = len(prompt_ids) - 1
    return [logprobs[start + j, t].item() for j, t in enumerate(candidate_ids)]


def test_score_equals_a_plain_forward_pass_when_requests_are_coalesced(gateway):
    backend = gateway.backend("tiny")
    jobs_before, batches_before = backend.batcher.jobs_run, backend.batcher.batches_run

    def score(prompt):
        return gateway.score(ScoreRequest(prompt=prompt, candidates=CANDIDATES, cache="bypass"))

    with ThreadPoolExecutor(len(PROMPTS)) as pool:
        results = list(pool.map(score, PROMPTS))
    jobs = backend.batcher.jobs_run - jobs_before
    batches = backend.batcher.batches_run - batches_before
    assert jobs == len(PROMPTS) and batches < jobs  # different prompts shared a pass
    for prompt, result in zip(PROMPTS, results, strict=True):
        for candidate, summed, per_token in zip(
            CANDIDATES, result.logprobs, result.token_logprobs, strict=True
        ):
            expected = plain_forward_logprobs(backend, prompt, candidate)
            assert per_token == pytest.approx(expected, abs=1e-4)
            assert summed == pytest.approx(sum(expected), abs=1e-4)
    # the distribution is peaked enough that candidates really differ
    assert max(results[0].logprobs) - min(results[0].logprobs) > 1.0


def test_chat_prompt_scores_candidates_as_the_assistant_reply(gateway):
    messages = [{"role": "user", "content": "What next?"}]
    result = gateway.score(ScoreRequest(prompt=messages, candidates=CANDIDATES[:2]))
    backend = gateway.backend("tiny")
    rendered = backend.lm.chat_prompt(messages)
    assert rendered.endswith("<|im_start|>assistant\n")
    expected = [sum(plain_forward_logprobs(backend, rendered, c)) for c in CANDIDATES[:2]]
    assert result.logprobs == pytest.approx(expected, abs=1e-4)


def test_concurrent_generation_is_batched_and_matches_sequential(gateway):
    backend = gateway.backend("tiny")
    requests = [
        GenerateRequest(messages=[{"role": "user", "content": p}], max_tokens=5 + i, cache="bypass")
        for i, p in enumerate(PROMPTS * 2)
    ]
    sequential = [gateway.generate(r).texts for r in requests]
    batches_before = backend.batcher.batches_run
    with ThreadPoolExecutor(len(requests)) as pool:
        concurrent = [r.texts for r in pool.map(gateway.generate, requests)]
    assert backend.batcher.batches_run - batches_before < len(requests)
    assert concurrent == sequential
    metrics = gateway.metrics.render().decode()
    assert 'llmrl_gateway_batch_size_count{kind="generate",model="tiny"}' in metrics


def test_seeded_samples_are_the_same_alone_and_batched_with_others(gateway):
    """Each sampling row draws from its own seeded generator: a seeded request's answers do
    not depend on what shares its batch (greedy, unseeded or other seeds), and sampled
    requests no longer run alone."""
    backend = gateway.backend("tiny")

    def request(prompt: str, **params) -> GenerateRequest:
        messages = [{"role": "user", "content": prompt}]
        return GenerateRequest(messages=messages, max_tokens=12, cache="bypass", **params)

    seeded = [request(p, temperature=1.0, seed=10 + i, n=2) for i, p in enumerate(PROMPTS)]
    others = [request(p, temperature=0.8, top_p=0.9) for p in PROMPTS] + [request("x")]
    alone = [gateway.generate(r).texts for r in seeded]
    assert all(len(set(texts)) == 2 for texts in alone)  # the n answers differ
    assert alone == [gateway.generate(r).texts for r in seeded]  # and repeat
    batches_before = backend.batcher.batches_run
    mixed = [*seeded, *others]
    with ThreadPoolExecutor(len(mixed)) as pool:
        together = [r.texts for r in pool.map(gateway.generate, mixed)]
    assert backend.batcher.batches_run - batches_before < len(mixed)
    assert together[: len(seeded)] == alone
    another_seed = gateway.generate(request(PROMPTS[0], temperature=1.0, seed=99, n=2)).texts
    assert another_seed != alone[0]


def test_stop_strings_and_n(gateway):
    request = GenerateRequest(prompt="a b c", max_tokens=12, n=3, cache="bypass")
    full = gateway.generate(request)
    assert len(full.texts) == 3 and len(set(full.texts)) == 1  # greedy: n identical answers
    single = gateway.generate(GenerateRequest(prompt="a b c", max_tokens=12, cache="bypass"))
    assert full.completion_tokens == 3 * single.completion_tokens
    text = full.texts[0]
    assert len(text) > 2
    stop = text[len(text) // 2 : len(text) // 2 + 2]
    cut = gateway.generate(GenerateRequest(prompt="a b c", max_tokens=12, stop=[stop]))
    assert cut.texts[0] == text[: text.find(stop)]
    assert cut.finish_reasons == ["stop"]


def make_adapter(base_dir, out_dir, seed: int) -> None:
    """A LoRA adapter with non-zero weights (peft starts B at zero, a no-op adapter)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    peft_model = get_peft_model(model, config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.5)
    peft_model.save_pretrained(out_dir)


def test_lora_adapters_by_name_and_version_swap_without_reloading(
    make_gateway, tiny_model_dir, tmp_path
):
    for version, seed in (("1", 1), ("2", 2)):
        make_adapter(tiny_model_dir, tmp_path / f"glam-v{version}", seed)
    adapters = {"glam": {"1": str(tmp_path / "glam-v1"), "2": str(tmp_path / "glam-v2")}}
    gateway = make_gateway(models={"tiny": {"adapters": adapters}})
    backend = gateway.backend("tiny")
    base_model = backend.lm.model

    def score(model):
        request = ScoreRequest(prompt=PROMPTS[1], candidates=CANDIDATES, model=model)
        return gateway.score(request)

    base = score("tiny")
    v1, v2 = score("tiny:glam@1"), score("tiny:glam@2")
    assert v1.model == "tiny:glam@1" and not v1.cached
    assert v1.logprobs != pytest.approx(base.logprobs, abs=1e-3)
    assert v2.logprobs != pytest.approx(v1.logprobs, abs=1e-3)
    # back to the base: same answers as before the adapters were loaded, same model object
    again = gateway.score(
        ScoreRequest(prompt=PROMPTS[1], candidates=CANDIDATES, model="tiny", cache="bypass")
    )
    assert again.logprobs == pytest.approx(base.logprobs, abs=1e-5)
    assert backend.lm.model is base_model and backend.adapters.loaded == {"glam@1", "glam@2"}
    assert score("tiny:glam@1").cached  # the adapter version is part of the cache key
    with pytest.raises(InvalidRequestError, match="adapter 'glam@9'") as caught:
        score("tiny:glam@9")
    assert caught.value.field == "model"
