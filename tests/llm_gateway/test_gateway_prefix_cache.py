"""Scoring reuses the KV cache of a shared prompt prefix and still equals a forward pass."""

from __future__ import annotations

import pytest
from test_gateway_local_model import CANDIDATES, plain_forward_logprobs

from llmrl.llm_gateway.api_types import ScoreRequest

SYSTEM = (
    "You plan for a robot in a grid world. Skills: explore, go to the <colour> <object>, "
    "pick up the <colour> <object>, toggle the <colour> <object>. Answer with one skill. "
)


def test_prompts_sharing_a_prefix_reuse_it_and_score_exactly(gateway):
    backend = gateway.backend("tiny")
    cache = backend.lm.prefix_cache
    prompts = [SYSTEM + "You see a red key.", SYSTEM + "You see a locked blue door."]
    for prompt in prompts:
        result = gateway.score(ScoreRequest(prompt=prompt, candidates=CANDIDATES, cache="bypass"))
        for candidate, per_token in zip(CANDIDATES, result.token_logprobs, strict=True):
            expected = plain_forward_logprobs(backend, prompt, candidate)
            assert per_token == pytest.approx(expected, abs=1e-4)
    ids = [backend.lm.encode(p) for p in prompts]
    start, reused = cache.lookup("", [*ids[1], 1, 2, 3])
    assert reused is not None and start == len(ids[1])  # the whole second prompt is cached
    shared, _ = cache.lookup("", [*ids[0][:-1], 0])
    assert shared == len(ids[0]) - 1
    # Adapters never share cached prefixes.
    assert cache.lookup("some-adapter@1", ids[1])[1] is None


def test_the_same_prompt_scored_again_recomputes_only_its_last_token(gateway):
    backend = gateway.backend("tiny")
    prompt = SYSTEM + "You see nothing."
    first = gateway.score(ScoreRequest(prompt=prompt, candidates=CANDIDATES, cache="bypass"))
    again = gateway.score(ScoreRequest(prompt=prompt, candidates=CANDIDATES, cache="bypass"))
    assert again.logprobs == pytest.approx(first.logprobs, abs=1e-5)
    ids = backend.lm.encode(prompt)
    assert backend.lm.prefix_cache.lookup("", ids)[0] == len(ids) - 1
