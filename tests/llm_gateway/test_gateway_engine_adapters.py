"""LoRA adapters on a serving engine, against a real server of that protocol: a second llmrl
gateway (uvicorn on a free port, behind a token) serves vLLM's runtime LoRA API
(`/v1/load_lora_adapter`, `/v1/unload_lora_adapter`), and a front gateway whose "tiny" is an
`openai` endpoint pointing at it publishes an adapter version the learner trained (SFT, saved
under LLMRL_HOME) on its first use, then scores `tiny:mine@1` through it as the back scores it
locally. `lora_path` is request data: only a version llmrl saved, with safetensors weights,
loads; every refusal is a 4xx naming the field."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from support.tiny_llm import TINY_MODEL, tiny_gateway_settings

from llmrl.common.registry import registry
from llmrl.learner.adapters import adapter_versions
from llmrl.learner.versions import save_version
from llmrl.llm_gateway.api_types import ScoreRequest
from llmrl.llm_gateway.errors import InvalidRequestError, UpstreamError
from llmrl.llm_gateway.gateway import Gateway
from llmrl.llm_gateway.rest import create_app
from llmrl.llm_gateway.service import RestServer

TOKEN = "engine-token"
PROMPT = "You see a mug. Where does the mug go?"
CANDIDATES = [" 1. place mug_1 on counter_1", " north", " pick up the key"]
EXAMPLE = {
    "messages": [
        {"role": "user", "content": "Where does the mug go?"},
        {"role": "assistant", "content": "1. place mug_1 on counter_1"},
    ]
}


@pytest.fixture(scope="module")
def engine(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """(home, trained adapter version, back gateway, its server, front gateway)."""
    root = tmp_path_factory.mktemp("engine-adapters")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LLMRL_HOME", str(root / "home"))
        patch.setenv("ENGINE_TOKEN", TOKEN)
        data = root / "train.jsonl"
        data.write_text((json.dumps(EXAMPLE) + "\n") * 4)
        version = registry.get_algorithm("sft").train(
            str(data), adapter_versions(TINY_MODEL, "mine"), base_model=str(tiny_model_dir),
            steps=3, batch_size=2, learning_rate=5e-2, lora_r=4, max_length=256, bf16=False,
        )  # fmt: skip
        back = Gateway(tiny_gateway_settings(tiny_model_dir), mode="embedded")
        server = RestServer(create_app(back, token=TOKEN)).start()
        endpoint = {"backend": "openai", "base_url": f"{server.url}/v1", "remote_model": TINY_MODEL,
                    "api_key_env": "ENGINE_TOKEN", "max_retries": 0, "score": True,
                    "tokenizer": str(tiny_model_dir), "weights": str(tiny_model_dir)}  # fmt: skip
        settings = tiny_gateway_settings(tiny_model_dir)
        settings["models"] = {
            TINY_MODEL: {**endpoint, "load_adapters": True},
            # the engine's name for it set otherwise; and a version from a foreign folder
            "named": {**endpoint, "load_adapters": True,
                      "adapter_names": "{model}-{adapter}-v{version}",
                      "adapters": {"mine": {"1": str(version.path)},
                                   "foreign": {"1": str(root / "foreign")}}},
            "preloaded": endpoint,  # load_adapters off: the engine must already serve names
        }  # fmt: skip
        foreign = shutil.copytree(version.path, root / "foreign")  # the same weights, but
        metadata = foreign / "llmrl_checkpoint.json"  # metadata llmrl never recorded
        metadata.write_text(metadata.read_text() + " ")
        front = Gateway(settings, mode="embedded")
        yield root / "home", version.path, back, server, front
        front.close()
        server.stop()
        back.close()


def load(server: RestServer, body: dict[str, Any], token: str | None = TOKEN) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.post(f"{server.url}/v1/load_lora_adapter", json=body, headers=headers)


def unload(server: RestServer, name: str) -> httpx.Response:
    return httpx.post(
        f"{server.url}/v1/unload_lora_adapter",
        json={"lora_name": name},
        headers={"Authorization": f"Bearer {TOKEN}"},
    )


def scores(gateway: Gateway, model: str) -> Any:
    request = ScoreRequest(prompt=PROMPT, candidates=CANDIDATES, model=model, cache="bypass")
    return gateway.score(request)


def test_a_trained_adapter_scores_through_the_engine_as_locally(engine):
    _, _, back, _, front = engine
    local = scores(back, f"{TINY_MODEL}:mine@1")  # the back's own adapter by version
    through = scores(front, f"{TINY_MODEL}:mine@1")  # published to the back, then used
    base = scores(back, TINY_MODEL)
    assert back.lora_adapters() == {"mine@1": TINY_MODEL}  # the default name on the engine
    assert through.logprobs == pytest.approx(local.logprobs, abs=1e-4)
    for row, expected in zip(through.token_logprobs, local.token_logprobs, strict=True):
        assert row == pytest.approx(expected, abs=1e-4)
    # the adapter was trained: it moved the scores well beyond that tolerance
    assert max(abs(a - b) for a, b in zip(local.logprobs, base.logprobs, strict=True)) > 1e-2
    # the engine's name for the adapter is a setting; the same weights score the same
    named = scores(front, "named:mine@1")
    assert named.logprobs == pytest.approx(local.logprobs, abs=1e-4)
    assert "named-mine-v1" in back.lora_adapters()
    listed = {m["id"]: m for m in back.models()}
    assert listed["mine@1"]["parent"] == TINY_MODEL


def test_load_and_unload_over_rest_as_vllm(engine):
    home, version, _, server, _ = engine
    answer = load(server, {"lora_name": "rest-mine", "lora_path": str(version)})
    assert answer.status_code == 200 and "added successfully" in answer.text
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=TOKEN)
    kwargs = {"prompt": PROMPT, "echo": True, "logprobs": 0, "max_tokens": 0}
    by_lora = client.completions.create(model="rest-mine", **kwargs)
    by_version = client.completions.create(model=f"{TINY_MODEL}:mine@1", **kwargs)
    base = client.completions.create(model=TINY_MODEL, **kwargs)
    assert (
        by_lora.choices[0].logprobs.token_logprobs == by_version.choices[0].logprobs.token_logprobs
    )
    assert by_lora.choices[0].logprobs.token_logprobs != base.choices[0].logprobs.token_logprobs
    assert "rest-mine" in {m.id for m in client.models.list().data}
    # a name is loaded once, as vLLM refuses it; a `run:`-free path under the home is fine
    again = load(server, {"lora_name": "rest-mine", "lora_path": str(version)})
    assert again.status_code == 400 and again.json()["error"]["param"] == "lora_name"
    assert "already been loaded" in again.json()["error"]["message"]
    gone = unload(server, "rest-mine")
    assert gone.status_code == 200 and "removed" in gone.text
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="rest-mine", **kwargs)
    missing = unload(server, "rest-mine")
    assert missing.status_code == 404 and missing.json()["error"]["param"] == "lora_name"
    # loaded again under its name after the unload
    assert load(server, {"lora_name": "rest-mine", "lora_path": str(version)}).status_code == 200
    assert home in version.parents


def test_lora_paths_are_confined_to_what_llmrl_saved(engine, tmp_path, monkeypatch):
    home, version, _, server, _ = engine
    monkeypatch.delenv("LLMRL_ARTIFACT_ROOTS")  # the tests' temp folder is one: only the home
    outside = shutil.copytree(version, tmp_path / "outside")
    foreign = shutil.copytree(version, home / "placed" / "1")  # in the home, never recorded
    from llmrl.common.trusted import METADATA_FILE

    (foreign / METADATA_FILE).write_text((version / METADATA_FILE).read_text() + " ")
    pickled = save_version(
        home / "adapters" / TINY_MODEL / "pickled" / "1",
        lambda d: [shutil.copy(version / "adapter_config.json", d),
                   (d / "adapter_model.bin").write_bytes(b"not loaded")],
        "sft",
    ).path  # fmt: skip
    line = version.parent  # a line, not a version
    cases = [
        ({"lora_path": str(outside)}, "lora_path", "names no artifact llmrl saved"),
        ({"lora_path": str(foreign)}, "lora_path", "names no artifact llmrl saved"),
        ({"lora_path": str(version / ".." / ".." / ".." / ".." / "..")}, "lora_path", "names no"),
        ({"lora_path": str(pickled)}, "lora_path", "safetensors only"),
        ({"lora_path": str(line)}, "lora_path", "no LoRA adapter version"),
        ({"lora_path": 3}, "lora_path", "a string"),
        ({"lora_name": "tiny:mine@1"}, "lora_name", "no ':'"),
        ({"lora_name": TINY_MODEL}, "lora_name", "configured model"),
        ({"lora_name": ""}, "lora_name", "1-200"),
        ({"model": "nonexistent"}, "model", "nonexistent"),
    ]
    for change, param, says in cases:
        body = {"lora_name": "checked", "lora_path": str(version), **change}
        answer = load(server, body)
        assert 400 <= answer.status_code < 500, (change, answer.text)
        error = answer.json()["error"]
        assert error["param"] == param and says in error["message"], (change, error)
        assert str(outside) not in error["message"] or "outside" in change.get("lora_path", "")
    assert (
        load(server, {"lora_name": "checked", "lora_path": str(version)}, token=None).status_code
        == 401
    )
    assert (
        load(server, {"lora_name": "checked", "lora_path": str(version)}, "wrong").status_code
        == 401
    )


def test_the_engines_refusal_is_named_and_unknown_names_are_400(engine):
    _, _, _, _, front = engine
    with pytest.raises(UpstreamError, match="refused to load adapter 'foreign@1'") as info:
        scores(front, "named:foreign@1")
    assert "answered 400" in str(info.value) and "lora_path" in str(info.value)
    with pytest.raises(InvalidRequestError, match="engine serves no adapter 'other@1'") as refused:
        scores(front, "preloaded:other@1")
    assert refused.value.field == "model" and "load_adapters" in refused.value.message
    with pytest.raises(InvalidRequestError, match="not found") as unknown:
        scores(front, f"{TINY_MODEL}:never@1")  # nothing to publish: refused before the engine
    assert unknown.value.field == "model"
