"""`deterministic` (the `hf` model setting, on by default): a request's log-probs and greedy
tokens are bitwise the same whether it runs alone or in any batch the gateway forms, with a
segmented prompt and with a prefix cache primed by an earlier request too; they still equal a
plain forward pass; and `deterministic: false` still runs the batched path.

The bitwise score assertions fail on the batched path: with `deterministic: false` (the code
before the setting existed) the target's log-probs in batches of 2 to 8 differ from its own by
up to ~4e-6 in float32 on the tiny model (padding and batch rows change the kernels'
reduction order), and a prefix-cache hit at an arbitrary length differs from a miss (checked
on a 2-core x86 CPU). The generation test passes on both paths: the tiny model's greedy and
seeded tokens are far from ties, so it guards the per-row decoding rather than proving it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch

from llmrl.llm_gateway.api_types import GenerateRequest, ScoreRequest
from llmrl.llm_gateway.local_causal_lm import GenJob, LocalCausalLM, ScoreJob

SYSTEM = (
    "You plan for a robot in a grid world. Skills: explore, go to the <colour> <object>, "
    "pick up the <colour> <object>, toggle the <colour> <object>. Answer with one skill. "
)
TARGET_PROMPT = "You are in a kitchen with a red key and a locked door. What next?"
TARGET_CANDIDATES = [" open the door", " go north", " pick up the red key and leave", " a"]
OTHER_PROMPTS = [
    "Hi.",
    SYSTEM + "You see a blue ball.",
    "The door is locked. Your mission: open the yellow door and go through it. " * 3,
    "Go",
    "You are in a kitchen with a red key and a locked door. What now?",
    SYSTEM * 2 + "Nothing here.",
    "Pick one:",
]
OTHER_CANDIDATES = [
    [" x"],
    [" go to the blue ball", " explore"],
    [" toggle the yellow door and walk through it quickly", " no", " open it"],
    [" left", " right", " up", " down", " wait"],
    [" open the door"],
    [" explore the whole room carefully"],
    [" a b c d e f g h i j k l m n o p"],
]
BATCH_SIZES = (2, 3, 5, 8)


@pytest.fixture(scope="module")
def tiny(tiny_model_dir: Path) -> tuple[Any, Any]:
    """(model, tokenizer) of the tiny random Llama in float32."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    return model.eval(), tokenizer


def make_lm(tiny: tuple[Any, Any], **options: Any) -> LocalCausalLM:
    """A fresh scorer (empty prefix cache) over the shared tiny weights."""
    return LocalCausalLM(*tiny, **options)


def score_job(lm: LocalCausalLM, prompt: str, candidates: list[str]) -> ScoreJob:
    return ScoreJob(lm.encode(prompt), [lm.encode(c) for c in candidates])


def others(lm: LocalCausalLM) -> list[ScoreJob]:
    return [score_job(lm, p, c) for p, c in zip(OTHER_PROMPTS, OTHER_CANDIDATES, strict=True)]


def placements(size: int) -> list[int]:
    """The target's positions in a batch of `size`: first, middle and last."""
    return sorted({0, size // 2, size - 1})


def batches_around(target: ScoreJob, fillers: list[ScoreJob]) -> Iterator[tuple[int, list[Any]]]:
    """(target's position, batch) for every batch size and position, the other rows rotating
    so that each batch mixes different prompt and candidate lengths."""
    for size in BATCH_SIZES:
        for position in placements(size):
            start = (size + position) % len(fillers)
            rest = [fillers[(start + k) % len(fillers)] for k in range(size - 1)]
            yield position, [*rest[:position], target, *rest[position:]]


def plain_forward_logprobs(lm: LocalCausalLM, prompt: list[int], cand: list[int]) -> list[float]:
    """Reference: one forward of prompt + candidate (no cache, no padding), log_softmax."""
    ids = torch.tensor([prompt + cand])
    with torch.inference_mode():
        logprobs = torch.log_softmax(lm.model(input_ids=ids).logits.float(), dim=-1)[0]
    start = len(prompt) - 1
    return [logprobs[start + j, t].item() for j, t in enumerate(cand)]


def assert_bitwise_alone_and_batched(lm: LocalCausalLM, target: ScoreJob) -> list[list[float]]:
    alone = lm.score([target])[0]
    assert len(alone) == len(target.candidate_ids)
    for position, batch in batches_around(target, others(lm)):
        got = lm.score(batch)[position]
        # exact: the same floats, not approximately
        assert got == alone, f"batch of {len(batch)}, target at {position}"
        for row, row_alone in zip(got, alone, strict=True):
            assert torch.equal(torch.tensor(row), torch.tensor(row_alone))
    return alone


def test_a_score_job_is_bitwise_the_same_alone_and_in_batches(tiny):
    lm = make_lm(tiny)
    target = score_job(lm, TARGET_PROMPT, TARGET_CANDIDATES)
    alone = assert_bitwise_alone_and_batched(lm, target)
    # and correct: each candidate's log-probs are those of a plain forward pass
    for cand, row in zip(target.candidate_ids, alone, strict=True):
        expected = plain_forward_logprobs(lm, target.prompt_ids, cand)
        assert row == pytest.approx(expected, abs=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no GPU here")
def test_a_score_job_is_bitwise_the_same_alone_and_in_batches_on_a_gpu(tiny):
    """The same on a GPU, with its numerics pinned as every model placed there is (torch's
    deterministic algorithms, a fixed cuBLAS workspace, no TF32): a device test, run where a
    GPU is lent."""
    import copy

    from llmrl.common.devices import resolve_device

    model, tokenizer = tiny
    lm = LocalCausalLM(copy.deepcopy(model).to(resolve_device("cuda")), tokenizer)
    assert torch.are_deterministic_algorithms_enabled()
    target = score_job(lm, TARGET_PROMPT, TARGET_CANDIDATES)
    assert_bitwise_alone_and_batched(lm, target)


@pytest.mark.parametrize(("segment", "packs"), [(16, False), (40, True)])
def test_segmented_prompts_and_a_primed_prefix_cache_change_no_bit(tiny, segment, packs):
    """A prompt longer than `score_forward_tokens` runs in segments at fixed offsets from its
    first token; an earlier request sharing its first segments primes the prefix cache, and
    the hit computes exactly the passes a miss would. With 16-token passes the candidates run
    on the prompt's cache in small chunks; with 40 they fit the pass of the prompt's last
    segment (packed under a tree mask)."""
    options = {"score_forward_tokens": segment, "score_chunk_tokens": 160}
    fresh = make_lm(tiny, **options)
    long_prompt = SYSTEM + TARGET_PROMPT
    target = score_job(fresh, long_prompt, TARGET_CANDIDATES)
    assert len(target.prompt_ids) > segment + 16 and fresh._packs(target) == packs
    before = fresh.score_forwards
    cold = fresh.score([target])[0]  # nothing cached: every segment computed
    cold_passes = fresh.score_forwards - before

    primed = make_lm(tiny, **options)
    primed.score([score_job(primed, SYSTEM + "You see a green box.", [" open it"])])
    start, _ = primed.prefix_cache.lookup("", target.prompt_ids, segment)
    assert start >= segment and start % segment == 0  # whole segments of the shared prefix
    before = primed.score_forwards
    hit = primed.score([target])[0]
    assert primed.score_forwards - before < cold_passes  # the cache did save passes
    assert hit == cold
    assert_bitwise_alone_and_batched(primed, target)
    assert_bitwise_alone_and_batched(fresh, target)  # now with its own prompt cached
    for cand, row in zip(target.candidate_ids, cold, strict=True):
        expected = plain_forward_logprobs(fresh, target.prompt_ids, cand)
        assert row == pytest.approx(expected, abs=1e-5)


def test_every_row_of_a_batch_equals_a_plain_forward_pass(tiny):
    lm = make_lm(tiny, score_forward_tokens=16)
    jobs = [score_job(lm, TARGET_PROMPT, TARGET_CANDIDATES), *others(lm)]
    assert {lm._packs(job) for job in jobs} == {True, False}  # both ways of scoring
    for job, rows in zip(jobs, lm.score(jobs), strict=True):
        for cand, row in zip(job.candidate_ids, rows, strict=True):
            expected = plain_forward_logprobs(lm, job.prompt_ids, cand)
            assert row == pytest.approx(expected, abs=1e-5)


def gen_job(lm: LocalCausalLM, prompt: str, max_tokens: int, **sampling: Any) -> GenJob:
    return GenJob(lm.encode(lm.chat_prompt([{"role": "user", "content": prompt}])),
                  sampling.pop("n", 1), max_tokens, None, **sampling)  # fmt: skip


def test_generation_is_the_same_alone_and_in_batches(tiny):
    """Greedy rows (and seeded sampled ones) give the same tokens alone and batched with
    other prompts of other lengths, in any position."""
    lm = make_lm(tiny)
    targets = [
        gen_job(lm, TARGET_PROMPT, 12),
        gen_job(lm, "Hi.", 9, temperature=1.0, seed=7, n=2),
    ]
    fillers = [gen_job(lm, p, 4 + i % 5) for i, p in enumerate(OTHER_PROMPTS)]
    fillers[2] = gen_job(lm, OTHER_PROMPTS[2], 6, temperature=0.8, top_p=0.9)
    for target in targets:
        alone = lm.generate([target])[0]
        assert alone.completion_tokens > 0
        for size in BATCH_SIZES:
            for position in placements(size):
                rest = fillers[: size - 1]
                batch = [*rest[:position], target, *rest[position:]]
                assert lm.generate(batch)[position] == alone, (size, position)


def test_concurrent_requests_through_the_batcher_get_their_answers_alone(make_gateway):
    """Threads submitting at once to the gateway (its dynamic batcher groups them) get
    exactly what each request gets alone."""
    gateway = make_gateway(models={"tiny": {"max_wait_ms": 50, "score_forward_tokens": 32}})
    backend = gateway.backend("tiny")
    scores = [
        ScoreRequest(prompt=p, candidates=c, cache="bypass")
        for p, c in zip([TARGET_PROMPT, *OTHER_PROMPTS], [TARGET_CANDIDATES, *OTHER_CANDIDATES],
                        strict=True)
    ]  # fmt: skip
    chats = [
        GenerateRequest(messages=[{"role": "user", "content": p}], max_tokens=6 + i % 4,
                        cache="bypass")
        for i, p in enumerate([TARGET_PROMPT, *OTHER_PROMPTS[:5]])
    ]  # fmt: skip
    alone_scores = [gateway.score(r).token_logprobs for r in scores]
    alone_texts = [gateway.generate(r).texts for r in chats]
    requests: list[Any] = [*scores, *chats]
    gate = threading.Barrier(len(requests))

    def call(request: Any) -> Any:
        gate.wait()
        if isinstance(request, ScoreRequest):
            return gateway.score(request).token_logprobs
        return gateway.generate(request).texts

    jobs_before, batches_before = backend.batcher.jobs_run, backend.batcher.batches_run
    with ThreadPoolExecutor(len(requests)) as pool:
        together = list(pool.map(call, requests))
    assert backend.batcher.jobs_run - jobs_before == len(requests)
    assert backend.batcher.batches_run - batches_before < len(requests)  # they were grouped
    assert together == [*alone_scores, *alone_texts]


def test_the_batched_path_still_runs_with_deterministic_false(tiny, make_gateway):
    """`deterministic: false`: the rows of different jobs share forward passes again, and
    their log-probs stay close to the deterministic ones (not bitwise: see the module's
    docstring)."""
    gateway = make_gateway(models={"tiny": {"deterministic": False}})
    batched = gateway.backend("tiny").lm
    assert not batched.deterministic
    steady = make_lm(tiny)
    assert steady.deterministic  # the default
    jobs = [score_job(steady, TARGET_PROMPT, TARGET_CANDIDATES), *others(steady)]
    rows_per_pass: list[int] = []
    hook = batched.model.register_forward_hook(
        lambda _module, _args, kwargs, _out: rows_per_pass.append(kwargs["input_ids"].shape[0]),
        with_kwargs=True,
    )
    try:
        fast = batched.score(jobs)
    finally:
        hook.remove()
    widest_job = max(len(job.candidate_ids) for job in jobs)
    assert max(rows_per_pass) > widest_job  # candidates of several jobs shared a pass
    for fast_rows, steady_rows in zip(fast, steady.score(jobs), strict=True):
        for row, expected in zip(fast_rows, steady_rows, strict=True):
            assert row == pytest.approx(expected, abs=1e-3)
    request = GenerateRequest(prompt=TARGET_PROMPT, max_tokens=8, cache="bypass")
    assert gateway.generate(request).texts == steady.generate([GenJob(
        steady.encode(TARGET_PROMPT), 1, 8, None)])[0].texts  # fmt: skip
