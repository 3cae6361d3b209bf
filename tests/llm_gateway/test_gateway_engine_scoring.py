"""Scoring through a serving engine, against a real server of that protocol: a second llmrl
gateway (uvicorn on a free port) serving the tiny model answers `echo` + `logprobs` on its
`/v1/completions`, and a front gateway whose models are `openai` endpoints pointing at it
(`score: true`) scores candidates through it. The front's scores equal the back's local
`/v1/score` (sum and mean reductions, candidates of 1-6 tokens, a candidate whose first token
merges with the prompt's last); the echoed log-probs equal a plain forward pass of the model;
what stays unsupported is a 400 naming the field."""

from __future__ import annotations

from itertools import accumulate
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from fastapi import FastAPI, Request
from support.tiny_llm import TINY_MODEL, tiny_gateway_settings

from llmrl.llm_gateway.api_types import GenerateRequest, ScoreRequest
from llmrl.llm_gateway.errors import InvalidRequestError
from llmrl.llm_gateway.gateway import Gateway
from llmrl.llm_gateway.rest import create_app
from llmrl.llm_gateway.service import RestServer

# "do" + "or": the engine's tokenizer reads " door" where the local scorer, which encodes the
# prompt and each candidate apart, reads " do" then "or"
PROMPT = "You open the do"
CANDIDATES = ["or", " open the door", " go left", " pick up the key and leave", " north"]
CHAT = [{"role": "system", "content": "Pick an action."}, {"role": "user", "content": "A door."}]


def stored_settings(model_dir: Path, folder: Path) -> dict[str, Any]:
    """The tiny model's settings with the cache and the ledger in SQLite under `folder`."""
    settings = tiny_gateway_settings(
        model_dir, {"backend": "sqlite", "sqlite_path": str(folder / "cache.sqlite")},
        max_batch_size=8,
    )  # fmt: skip
    settings["ledger"] = {"backend": "sqlite", "sqlite_path": str(folder / "ledger.sqlite")}
    return settings


@pytest.fixture(scope="module")
def servers(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """(back gateway, its server, front gateway, its server): the back serves "tiny" locally;
    the front's models reach it over HTTP with the official openai client."""
    back_dir, front_dir = tmp_path_factory.mktemp("back"), tmp_path_factory.mktemp("front")
    back = Gateway(stored_settings(tiny_model_dir, back_dir), mode="embedded")
    back_server = RestServer(create_app(back)).start()
    engine = {"backend": "openai", "base_url": f"{back_server.url}/v1",
              "remote_model": TINY_MODEL, "max_retries": 0}  # fmt: skip
    models = {
        "engine": {**engine, "score": True, "tokenizer": str(tiny_model_dir)},
        "engine-text": {**engine, "score": True},
        "engine-one-by-one": {**engine, "score": True, "score_max_tokens": 1, "score_batch": False},
        "engine-plain": engine,  # score not enabled
    }
    front_settings = stored_settings(tiny_model_dir, front_dir)
    front_settings["models"].update(models)
    front_settings["default_model"] = "engine"
    front = Gateway(front_settings, mode="embedded")
    front_server = RestServer(create_app(front)).start()
    yield back, back_server, front, front_server
    front_server.stop()
    back_server.stop()
    front.close()
    back.close()


def local_and_engine(servers: Any, model: str, prompt: Any) -> tuple[Any, Any]:
    back, _, front, _ = servers
    kwargs = {"prompt": prompt, "candidates": CANDIDATES, "cache": "bypass"}
    local = back.score(ScoreRequest(model=TINY_MODEL, **kwargs))
    engine = front.score(ScoreRequest(model=model, **kwargs))
    return local, engine


def means(result: Any) -> list[float]:
    return [
        total / len(row) for total, row in zip(result.logprobs, result.token_logprobs, strict=True)
    ]


@pytest.mark.parametrize("prompt", [PROMPT, CHAT], ids=["text", "chat"])
def test_scores_through_the_engine_equal_the_local_scores(servers, prompt):
    local, engine = local_and_engine(servers, "engine", prompt)
    assert [len(row) for row in engine.token_logprobs] == [len(row) for row in local.token_logprobs]
    assert [len(row) for row in local.token_logprobs] == [1, 3, 2, 6, 1]
    assert engine.logprobs == pytest.approx(local.logprobs, abs=1e-4)  # sum reduction
    assert means(engine) == pytest.approx(means(local), abs=1e-4)  # mean reduction
    for engine_row, local_row in zip(engine.token_logprobs, local.token_logprobs, strict=True):
        assert engine_row == pytest.approx(local_row, abs=1e-4)
    # the engine counted prompt + candidate for each candidate: that is what the front records
    prompt_tokens = local.prompt_tokens - sum(map(len, local.token_logprobs))
    assert engine.prompt_tokens == len(CANDIDATES) * prompt_tokens + sum(
        map(len, local.token_logprobs)
    )


def test_text_mode_scores_the_engines_tokens_and_the_merged_one(servers):
    """Without the tokenizer the text is sent: candidates that start a token of their own get
    the local scores; "or" after "do" is read by the engine as " door", which counts for it."""
    _, back_server, front, _ = servers
    local, engine = local_and_engine(servers, "engine-text", PROMPT)
    for i in range(1, len(CANDIDATES)):
        assert engine.token_logprobs[i] == pytest.approx(local.token_logprobs[i], abs=1e-4)
    echoed = httpx.post(
        f"{back_server.url}/v1/completions",
        json={
            "model": TINY_MODEL,
            "prompt": PROMPT + "or",
            "echo": True,
            "logprobs": 0,
            "max_tokens": 0,
        },
    ).json()["choices"][0]["logprobs"]
    assert echoed["tokens"][-1] == " door"
    assert engine.token_logprobs[0] == pytest.approx([echoed["token_logprobs"][-1]], abs=1e-6)
    assert engine.token_logprobs[0][0] != pytest.approx(local.token_logprobs[0][0], abs=1e-3)
    # one request per candidate, each generating a token that is left out: the same scores
    # (within the last bits: the engine scores a longer sequence)
    one_by_one = front.score(
        ScoreRequest(prompt=PROMPT, candidates=CANDIDATES, model="engine-one-by-one")
    )
    for row, expected in zip(one_by_one.token_logprobs, engine.token_logprobs, strict=True):
        assert row == pytest.approx(expected, abs=1e-4)


def test_front_scores_over_rest_are_cached_and_counted(servers):
    _, _, front, front_server = servers
    body = {"model": "engine", "prompt": "You see a key.", "candidates": [" take it", " leave"]}
    headers = {"X-LLMRL-Run": "engine-run"}
    first = httpx.post(f"{front_server.url}/v1/score", json=body, headers=headers)
    second = httpx.post(f"{front_server.url}/v1/score", json=body, headers=headers)
    assert first.status_code == 200, first.text
    assert first.headers["x-llmrl-cache"] == "miss" and second.headers["x-llmrl-cache"] == "hit"
    assert second.json()["logprobs"] == first.json()["logprobs"]
    usage = front.usage("engine-run")
    assert usage["requests"] == 2 and usage["cache_hits"] == 1
    assert usage["prompt_tokens"] == first.json()["usage"]["prompt_tokens"] > 0


def plain_forward(model_dir: Path, ids: list[int]) -> list[float]:
    """Each token's log-prob after the ones before it, from one forward pass of the model."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([ids])).logits.float()
    logprobs = torch.log_softmax(logits, dim=-1)[0]
    return [logprobs[i - 1, ids[i]].item() for i in range(1, len(ids))]


def test_echo_logprobs_through_the_openai_client(servers, tiny_model_dir):
    """The back's /v1/completions answers echo + logprobs as OpenAI's legacy API does, and the
    front passes such a completion through to it."""
    _, back_server, _, front_server = servers
    back_client = openai.OpenAI(base_url=f"{back_server.url}/v1", api_key="unused")
    front_client = openai.OpenAI(base_url=f"{front_server.url}/v1", api_key="unused")
    prompt = "You see a door. You open it"
    answer = back_client.completions.create(
        model=TINY_MODEL, prompt=prompt, echo=True, logprobs=0, max_tokens=0
    )
    choice = answer.choices[0]
    assert choice.text == prompt and answer.usage.completion_tokens == 0
    logprobs = choice.logprobs
    assert "".join(logprobs.tokens) == prompt
    assert logprobs.text_offset == list(accumulate([0, *map(len, logprobs.tokens[:-1])]))
    assert logprobs.token_logprobs[0] is None and logprobs.top_logprobs[0] is None
    ids = servers[0].backend(TINY_MODEL).lm.encode(prompt)
    assert len(logprobs.tokens) == len(ids) == answer.usage.prompt_tokens
    expected = plain_forward(tiny_model_dir, ids)
    assert logprobs.token_logprobs[1:] == pytest.approx(expected, abs=1e-4)
    assert logprobs.top_logprobs[1] == {logprobs.tokens[1]: logprobs.token_logprobs[1]}

    # the same through the front (an `openai` model: passed to the engine), and by token ids
    through = front_client.completions.create(
        model="engine-plain", prompt=prompt, echo=True, logprobs=0, max_tokens=0
    )
    assert through.choices[0].logprobs.token_logprobs == logprobs.token_logprobs
    by_ids = back_client.completions.create(
        model=TINY_MODEL, prompt=[ids, ids[:3]], echo=True, logprobs=0, max_tokens=0
    )
    assert [c.index for c in by_ids.choices] == [0, 1]
    assert by_ids.choices[0].logprobs.token_logprobs[1:] == pytest.approx(
        logprobs.token_logprobs[1:], abs=1e-5
    )
    assert by_ids.choices[1].text == "".join(logprobs.tokens[:3])
    assert by_ids.usage.prompt_tokens == len(ids) + 3

    # generated tokens: with echo after the prompt's; without, alone, offset after the prompt
    echoed = back_client.completions.create(
        model=TINY_MODEL, prompt=prompt, echo=True, logprobs=0, max_tokens=4
    ).choices[0]
    generated = back_client.completions.create(
        model=TINY_MODEL, prompt=prompt, logprobs=0, max_tokens=4
    ).choices[0]
    assert echoed.text == prompt + generated.text
    assert echoed.logprobs.tokens == logprobs.tokens + generated.logprobs.tokens
    assert generated.logprobs.text_offset[0] == len(prompt)
    assert generated.logprobs.token_logprobs == pytest.approx(
        echoed.logprobs.token_logprobs[len(ids) :], abs=1e-5
    )
    full = ids + servers[0].backend(TINY_MODEL).lm.encode(generated.text)
    assert generated.logprobs.token_logprobs == pytest.approx(
        plain_forward(tiny_model_dir, full)[len(ids) - 1 :], abs=1e-4
    )


def test_prompt_logprob_completions_are_cached_and_deterministic(servers):
    _, back_server, _, _ = servers
    body = {"model": TINY_MODEL, "prompt": "Cache me", "echo": True, "logprobs": 0,
            "max_tokens": 0, "temperature": 1.0}  # fmt: skip
    first = httpx.post(f"{back_server.url}/v1/completions", json=body)
    second = httpx.post(f"{back_server.url}/v1/completions", json=body)
    assert first.headers["x-llmrl-cache"] == "miss" and second.headers["x-llmrl-cache"] == "hit"
    assert second.json()["choices"] == first.json()["choices"]


@pytest.mark.parametrize(
    ("model", "body", "param", "says"),
    [
        (TINY_MODEL, {"prompt": "x", "echo": True, "logprobs": 2, "max_tokens": 0},
         "logprobs", "logprobs 0"),
        (TINY_MODEL, {"prompt": [504, 6644], "max_tokens": 3}, "prompt", "max_tokens 0"),
        (TINY_MODEL, {"prompt": [504, 10**9], "echo": True, "max_tokens": 0}, "prompt[1]",
         "vocabulary"),
        (TINY_MODEL, {"prompt": "x", "logprobs": 0, "max_tokens": 0}, "max_tokens", "[1,"),
        (TINY_MODEL, {"prompt": "x", "logprobs": 21}, "logprobs", "[0, 20]"),
        (TINY_MODEL, {"prompt": [504, -1], "echo": True, "max_tokens": 0}, "prompt[1]",
         "token id"),
        (TINY_MODEL, {"prompt": "x", "echo": "yes"}, "echo", "true or false"),
        (TINY_MODEL, {"prompt": "x", "logprobs": 0, "stream": True}, "stream", "stream"),
        (TINY_MODEL, {"prompt": "x", "logprobs": 0, "best_of": 2}, "best_of", "best_of"),
        ("minilm", {"prompt": "x", "echo": True, "max_tokens": 0}, "model", "completion"),
    ],
)  # fmt: skip
def test_unsupported_completions_are_400_naming_the_field(servers, model, body, param, says):
    _, back_server, _, _ = servers
    response = httpx.post(f"{back_server.url}/v1/completions", json={"model": model, **body})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and says in error["message"], error


def test_unsupported_scores_and_chat_logprobs_are_400_naming_the_field(servers):
    back, back_server, _, front_server = servers
    chat = {"model": TINY_MODEL, "messages": CHAT, "logprobs": True, "top_logprobs": 2}
    response = httpx.post(f"{back_server.url}/v1/chat/completions", json=chat)
    assert response.status_code == 400 and response.json()["error"]["param"] == "logprobs"
    with pytest.raises(InvalidRequestError, match="chat completions return no log-prob") as info:
        back.generate(GenerateRequest(messages=CHAT, logprobs=0, model=TINY_MODEL))
    assert info.value.field == "logprobs"

    scored = {"prompt": "p", "candidates": [" a"]}
    plain = httpx.post(f"{front_server.url}/v1/score", json={**scored, "model": "engine-plain"})
    assert plain.status_code == 400
    error = plain.json()["error"]
    assert error["param"] == "model" and "score: true" in error["message"]
    assert "chat, completion, embed" in error["message"]
    chat_text = httpx.post(
        f"{front_server.url}/v1/score",
        json={"prompt": CHAT, "candidates": [" a"], "model": "engine-text"},
    )
    assert chat_text.status_code == 400
    assert chat_text.json()["error"]["param"] == "prompt"
    assert "tokenizer" in chat_text.json()["error"]["message"]
    adapter = httpx.post(f"{front_server.url}/v1/score", json={**scored, "model": "engine:a@1"})
    assert adapter.status_code == 400 and adapter.json()["error"]["param"] == "model"
    assert httpx.get(f"{back_server.url}/health").json()["status"] == "ok"


def prompt_only_engine(back_url: str) -> Any:
    """A stand-in for llama-cpp-python's server (0.3.36, tried on SmolLM2's GGUF): a real HTTP
    server whose `/v1/completions` answers as the back gateway does, but whose echoed log-probs
    leave out the generated tokens (the choice's text still holds them)."""
    app = FastAPI()

    @app.post("/v1/completions")
    async def completions(request: Request) -> dict[str, Any]:
        body = await request.json()
        async with httpx.AsyncClient() as client:
            answer = (await client.post(f"{back_url}/v1/completions", json=body)).json()
        for choice in answer["choices"]:
            sent = body["prompt"] if isinstance(body["prompt"], str) else body["prompt"][0]
            data = choice["logprobs"]
            kept = [i for i, offset in enumerate(data["text_offset"]) if offset < len(sent)]
            for key in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
                data[key] = [data[key][i] for i in kept]
        return answer

    return RestServer(app).start()


def test_an_engine_that_echoes_no_generated_token_scores_the_same(servers, tiny_model_dir):
    """With `score_max_tokens: 1`, which tokens were generated is read from the offsets past
    what was sent, whether the engine echoes their log-probs (vLLM) or not (llama-cpp-python)."""
    _, back_server, front, _ = servers
    engine = prompt_only_engine(back_server.url)
    try:
        settings = tiny_gateway_settings(tiny_model_dir)
        settings["models"]["prompt-only"] = {
            "backend": "openai", "base_url": f"{engine.url}/v1", "remote_model": TINY_MODEL,
            "max_retries": 0, "score": True, "score_max_tokens": 1, "score_batch": False,
        }  # fmt: skip
        gateway = Gateway(settings, mode="embedded")
        try:
            scored = gateway.score(
                ScoreRequest(prompt=PROMPT, candidates=CANDIDATES, model="prompt-only")
            )
        finally:
            gateway.close()
    finally:
        engine.stop()
    text = front.score(ScoreRequest(prompt=PROMPT, candidates=CANDIDATES, model="engine-text"))
    for row, expected in zip(scored.token_logprobs, text.token_logprobs, strict=True):
        assert row == pytest.approx(expected, abs=1e-4)
