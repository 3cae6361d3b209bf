"""Guided decoding (`guided_lines`, and vLLM's `guided_choice` over REST): every line of a
local model's answer is one of the choices, through every door (in-process, gRPC, the
official openai client); bad guidance is refused by field; remote models refuse it."""

from __future__ import annotations

import httpx
import openai
import pytest
from transformers import AutoTokenizer

from llmrl.llm_gateway.api_types import GuidedLines
from llmrl.llm_gateway.client import InProcessClient, connect
from llmrl.llm_gateway.errors import InvalidRequestError
from llmrl.llm_gateway.grpc_server import start_grpc_server
from llmrl.llm_gateway.guided import LineAutomaton
from llmrl.llm_gateway.rest import create_app
from llmrl.llm_gateway.service import RestServer

CHOICES = ["go to room kitchen_0", "go to room bathroom_0", "pick up mug_1", "mission complete"]
PROMPT = [{"role": "user", "content": "Tidy the house. What is your plan?"}]


def answer_lines(text: str, numbered: bool) -> list[str]:
    lines = [line for line in text.split("\n") if line]
    if not numbered:
        return lines
    stripped = []
    for i, line in enumerate(lines, 1):
        assert line.startswith(f"{i}. "), f"line {i} is not numbered: {line!r}"
        stripped.append(line[len(f"{i}. ") :])
    return stripped


def test_the_automaton_accepts_exactly_the_lines_of_the_choices(tiny_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)

    def encode(texts):
        return tokenizer(texts, add_special_tokens=False)["input_ids"]

    eos = [tokenizer.eos_token_id]
    guided = GuidedLines.from_value({"choices": CHOICES, "numbered": True, "max_lines": 2})
    automaton = LineAutomaton(guided, encode, eos)
    # walking a valid answer: every token allowed; the answer may end where line 1 ends (in
    # place of its line break, as fine-tuning data's plans end, or after it) and nowhere else
    # before line 2 is complete
    first, second, unbroken = encode(
        ["1. pick up mug_1\n", "2. mission complete", "1. pick up mug_1"]
    )
    assert unbroken == first[:-1]  # SmolLM2's tokenizer: the line break is a token of its own
    generated: list[int] = []
    for token in [*first, *second]:
        allowed = automaton.allowed(generated)
        assert allowed is not None and token in allowed
        assert (eos[0] in allowed) == (generated in (first, unbroken))
        generated.append(token)
    assert automaton.allowed(generated) == eos  # max_lines reached: only the end
    assert automaton.allowed([*generated, eos[0]]) is None  # over: no constraint
    # an unnumbered first line or an invented name is never allowed
    assert encode(["pick"])[0][0] not in automaton.allowed([])
    prefix = encode(["1. pick up"])[0]
    real, invented = encode(["1. pick up mug_1\n", "1. pick up cup_1\n"])
    assert real[: len(prefix)] == prefix == invented[: len(prefix)]
    allowed = automaton.allowed(prefix)
    assert allowed is not None and real[len(prefix)] in allowed
    assert invented[len(prefix)] not in allowed


@pytest.mark.parametrize("numbered", [True, False])
def test_every_line_of_a_guided_answer_is_a_choice(gateway, numbered):
    client = InProcessClient(gateway, owns_gateway=False)
    guided = {"choices": CHOICES, "numbered": numbered, "max_lines": 3}
    free = client.chat(PROMPT, max_tokens=24).text
    assert not all(line in CHOICES for line in answer_lines(free, False) or [""])  # random model
    result = client.chat(PROMPT, max_tokens=64, guided_lines=guided, n=4, temperature=1.0, seed=3)
    for text in result.texts:
        lines = answer_lines(text, numbered)
        assert 1 <= len(lines) <= 3
        assert all(line in CHOICES for line in lines), text
    one = client.chat(PROMPT, max_tokens=64, guided_lines={"choices": CHOICES, "max_lines": 1})
    assert one.text in CHOICES and one.finish_reasons == ["stop"]


def test_guidance_is_part_of_the_cache_key(gateway):
    client = InProcessClient(gateway, owns_gateway=False)
    first = client.chat(PROMPT, guided_lines={"choices": CHOICES[:2], "max_lines": 1})
    other = client.chat(PROMPT, guided_lines={"choices": CHOICES[2:], "max_lines": 1})
    assert not other.cached and other.text in CHOICES[2:] and first.text in CHOICES[:2]
    # the order of the choices does not matter; the same guidance is a hit
    again = client.chat(PROMPT, guided_lines={"choices": CHOICES[1::-1], "max_lines": 1})
    assert again.cached and again.text == first.text


def test_guided_lines_over_grpc_match_in_process(gateway):
    server = start_grpc_server(gateway, "127.0.0.1", 0)
    remote = connect(f"127.0.0.1:{server.port}")
    try:
        guided = {"choices": CHOICES, "numbered": True, "max_lines": 2}
        local = InProcessClient(gateway, owns_gateway=False)
        expected = local.chat(PROMPT, max_tokens=48, guided_lines=guided, cache=False).text
        got = remote.chat(PROMPT, max_tokens=48, guided_lines=guided, cache=False).text
        assert got == expected
        assert all(line in CHOICES for line in answer_lines(got, True))
        with pytest.raises(InvalidRequestError) as caught:
            remote.chat(PROMPT, guided_lines={"choices": CHOICES, "max_lines": 0})
        assert caught.value.field == "guided_lines.max_lines"
    finally:
        remote.close()
        server.stop(0)


def test_openai_client_with_guided_choice_and_guided_lines(gateway):
    server = RestServer(create_app(gateway)).start()
    try:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused")
        response = client.chat.completions.create(
            model="tiny", messages=PROMPT, extra_body={"guided_choice": ["yes", "no"]}
        )
        assert response.choices[0].message.content in ("yes", "no")
        response = client.chat.completions.create(
            model="tiny",
            messages=PROMPT,
            max_tokens=48,
            extra_body={"guided_lines": {"choices": CHOICES, "numbered": True, "max_lines": 2}},
        )
        lines = answer_lines(response.choices[0].message.content, True)
        assert lines and all(line in CHOICES for line in lines)
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"guided_lines": {"choices": []}}, "guided_lines.choices"),
        ({"guided_lines": {"choices": ["a\nb"]}}, "guided_lines.choices[0]"),
        ({"guided_lines": {"choices": ["a", ""]}}, "guided_lines.choices[1]"),
        ({"guided_lines": {"choices": ["a"], "max_lines": 0}}, "guided_lines.max_lines"),
        ({"guided_lines": {"choices": ["a"], "numbered": "yes"}}, "guided_lines.numbered"),
        ({"guided_lines": {"choices": ["a"], "regex": "a+"}}, "guided_lines"),
        ({"guided_lines": ["a"]}, "guided_lines"),
        ({"guided_choice": "a"}, "guided_choice"),
        ({"guided_choice": ["a"], "guided_lines": {"choices": ["a"]}}, "guided_choice"),
    ],
)
def test_bad_guidance_is_a_400_naming_the_field(gateway, body, param):
    server = RestServer(create_app(gateway)).start()
    try:
        response = httpx.post(
            f"{server.url}/v1/chat/completions", json={"messages": PROMPT, **body}, timeout=30
        )
        assert response.status_code == 400, response.text
        assert response.json()["error"]["param"] == param
        # the server keeps serving
        ok = httpx.post(f"{server.url}/v1/chat/completions", json={"messages": PROMPT})
        assert ok.status_code == 200
    finally:
        server.stop()


def test_remote_models_refuse_guidance_by_name(make_gateway):
    gateway = make_gateway(
        models={"remote": {"backend": "openai", "base_url": "http://127.0.0.1:9/v1"}}
    )
    client = InProcessClient(gateway, owns_gateway=False)
    with pytest.raises(InvalidRequestError) as caught:
        client.chat(PROMPT, model="remote", guided_lines={"choices": ["a"]})
    assert caught.value.field == "guided_lines" and "hf" in str(caught.value)
