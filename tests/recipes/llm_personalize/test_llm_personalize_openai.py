"""llm-personalize with finetune_backend=openai, in a real `llmrl run` process against a local
stand-in of the OpenAI API: each train phase fine-tunes on the API (round 1 from the bootstrap
fine-tune, on the round's data plus the bootstrap data in one file), and every stage plans
through the gateway's openai backend with its own model id; the key appears nowhere."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support.openai_standin import ChatLog, StandinState, create_openai_api

from llmrl.llm_gateway.service import RestServer
from llmrl.recipes.llm_personalize.openai_models import gateway_name

KEY = "sk-standin-secret-4242"
BASE = "gpt-4o-mini-2024-07-18"


def phase_outputs(db: Path) -> dict[str, dict]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT phase, outputs FROM phases WHERE status = 'completed'")
        return {phase: json.loads(outputs) for phase, outputs in rows.fetchall()}


def test_openai_fine_tuning_stages_are_served_through_the_gateway(tmp_path: Path):
    finetuning, chats = StandinState(), ChatLog()
    api = RestServer(create_openai_api(finetuning, chats)).start()
    out = tmp_path / "run"
    # the stand-in is a provider the operator configured; the run config's
    # openai_base_url/openai_api_key_env pick it
    providers = tmp_path / "providers.yaml"
    standin = {"base_url": f"{api.url}/v1", "api_key_env": "STANDIN_KEY"}
    providers.write_text(yaml.safe_dump({"providers": {"standin": standin}}))
    env = dict(
        os.environ,
        LLMRL_HOME=str(tmp_path / "home"),
        STANDIN_KEY=KEY,
        LLMRL_PROVIDERS=str(providers),
    )
    env.pop("LLMRL_LLM_GATEWAY_CONFIG", None)
    config = [
        "finetune_backend=openai", f"openai_base_url={api.url}/v1",
        "openai_api_key_env=STANDIN_KEY", "openai_poll_s=0.01", "data_dir=procedural",
        "train_episodes=2", "eval_episodes=1", "rounds=1", "collect_samples=1", "max_steps=6",
        "max_tokens=16", "num_envs=2", "seed=3",
    ]  # fmt: skip
    try:
        run = subprocess.run(
            [sys.executable, "-m", "llmrl.cli", "run", "llm-personalize", *config,
             "--out", str(out), "--quiet"],
            env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    finally:
        api.stop()
    assert run.returncode == 0, run.stdout + run.stderr

    outputs = phase_outputs(out / "run.sqlite")
    train_0, train_1 = outputs["train/0"], outputs["train/1"]
    jobs = finetuning.jobs
    assert [job["model"] for job in jobs.values()] == [BASE, train_0["fine_tuned_model"]]
    assert train_0["fine_tuned_model"] == f"ft:{BASE}:org-standin:lp-0:ftjob-1"
    assert train_0["model"] == gateway_name(train_0["fine_tuned_model"])
    assert ":" not in train_0["model"]  # a name the gateway can route
    assert train_1["base_model"] == train_0["fine_tuned_model"]
    # the data: bootstrap for round 0; round 1's selection plus the bootstrap, as one file
    bootstrap = (out / "datasets" / "bootstrap.jsonl").read_bytes()
    round_1 = (out / "datasets" / "round-1.jsonl").read_bytes()
    uploaded = [finetuning.files[job["training_file"]] for job in jobs.values()]
    assert uploaded == [bootstrap, round_1 + bootstrap]
    assert train_0["examples"] == len(bootstrap.splitlines()) > 0

    # each stage planned with its own model through the gateway's openai backend
    models = [request["model"] for request in chats.requests]
    assert set(models) == {BASE, train_0["fine_tuned_model"], train_1["fine_tuned_model"]}
    assert outputs["evaluate/zero-shot"]["model"] == gateway_name(BASE)
    assert outputs["evaluate/0"]["model"] == train_0["model"]
    assert outputs["evaluate/1"]["model"] == train_1["model"]
    sampled = [request for request in chats.requests if request["temperature"]]
    assert sampled and all(request["seed"] is not None for request in sampled)  # collect/1

    results = json.loads((out / "results.json").read_text())
    assert results["title"] == f"llm-personalize: {BASE} on Housekeep"
    assert any("OpenAI job ftjob-2" in note for note in results["notes"])
    assert set(finetuning.keys_seen) == {KEY}
    everything = run.stdout + run.stderr + (out / "run.sqlite").read_bytes().decode("latin-1")
    assert KEY not in everything


def test_a_gateway_service_must_be_configured_and_the_error_shows_the_entry():
    import yaml

    from llmrl.llm_gateway.client import connect
    from llmrl.llm_gateway.gateway import Gateway
    from llmrl.llm_gateway.grpc_server import start_grpc_server
    from llmrl.recipes.llm_personalize.openai_models import serve_stage_model

    tuned = f"ft:{BASE}:org:lp-0:abc"
    settings = {"cache": {"backend": "none"}, "ledger": {"backend": "memory"}}
    gateway = Gateway(settings)
    server = start_grpc_server(gateway, "127.0.0.1", 0)
    remote = connect(f"127.0.0.1:{server.port}")
    try:
        try:
            serve_stage_model(remote, tuned, "http://127.0.0.1:9/v1", "MY_KEY")
        except RuntimeError as exc:
            message = str(exc)
        else:
            raise AssertionError("a gateway service cannot be configured by the recipe")
        entry = yaml.safe_load(message[message.index("models:") :])["models"]
        assert entry == {gateway_name(tuned): {"backend": "openai", "remote_model": tuned,
                         "api_key_env": "MY_KEY", "base_url": "http://127.0.0.1:9/v1"}}  # fmt: skip
        # once its configuration has the entry, the stage is served under that name
        gateway.settings.models.update(Gateway({**settings, "models": entry}).settings.models)
        assert serve_stage_model(remote, tuned, None, "MY_KEY") == gateway_name(tuned)
    finally:
        remote.close()
        server.stop(None)
        gateway.close()


def test_the_embedded_gateway_gets_the_entry_unless_its_config_has_one():
    from llmrl.llm_gateway.client import connect
    from llmrl.recipes.llm_personalize.openai_models import serve_stage_model

    name = gateway_name(BASE)
    configured = {
        "backend": "openai",
        "remote_model": BASE,
        "api_key_env": "X",
        "fallback": "smollm2",
    }
    llm = connect(cache={"backend": "none"}, models={name: configured})
    other = connect(cache={"backend": "none"})
    try:
        assert serve_stage_model(llm, BASE, "http://elsewhere/v1", "Y") == name
        assert llm.gateway.settings.models[name].fallback == "smollm2"  # the user's entry
        assert serve_stage_model(other, BASE, "http://elsewhere/v1", "Y") == name
        added = other.gateway.settings.models[name]
        assert (added.backend, added.remote_model, added.base_url, added.api_key_env) == (
            "openai", BASE, "http://elsewhere/v1", "Y"
        )  # fmt: skip
    finally:
        llm.close()
        other.close()


def test_run_configs_pick_configured_providers_never_their_own_endpoint(monkeypatch, tmp_path):
    from support.providers import configure_providers

    from llmrl.recipes.config import ConfigError, validate_config
    from llmrl.recipes.llm_personalize.train import openai_provider

    monkeypatch.setenv("MY_KEY", "sk-config")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    configure_providers(
        monkeypatch, tmp_path, mine={"base_url": "http://127.0.0.1:9/v1", "api_key_env": "MY_KEY"}
    )
    openai = {
        "data_dir": "procedural",
        "finetune_backend": "openai",
        "openai_api_key_env": "MY_KEY",
    }
    configured = validate_config(
        "llm-personalize", {**openai, "openai_base_url": "http://127.0.0.1:9/v1"}
    )
    assert openai_provider(configured) == "mine"
    # an endpoint no provider has is refused when the run is submitted, naming the key
    with pytest.raises(
        ConfigError, match=r"openai_base_url: no configured provider .* mine, openai"
    ):
        validate_config("llm-personalize", {**openai, "openai_base_url": "http://evil.example/v1"})
    # ... with the local backend too, where it would only be ignored
    with pytest.raises(ConfigError, match=r"openai_base_url: no configured provider"):
        validate_config(
            "llm-personalize",
            {"data_dir": "procedural", "openai_base_url": "http://evil.example/v1"},
        )
    # and a config that got past (stored before) still meets the check at run time
    elsewhere = configured.model_copy(update={"openai_base_url": "http://evil.example/v1"})
    with pytest.raises(
        ValueError, match=r"openai_base_url: no configured provider .* mine, openai"
    ):
        openai_provider(elsewhere)
