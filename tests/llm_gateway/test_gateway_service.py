"""`llmrl serve llm_gateway` as a real process: REST and gRPC from one process, the Redis
cache in service mode, and a clean exit on SIGTERM. `llmrl models` lists the configuration."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import yaml
from support.net import free_port

from llmrl.llm_gateway.client import connect
from llmrl.llm_gateway.settings import print_models


def test_serve_answers_rest_and_grpc_then_stops_on_sigterm(tiny_model_dir, tmp_path, redis_url):
    config = tmp_path / "gateway.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "default_model": "tiny",
                "models": {"tiny": {"backend": "hf", "path": str(tiny_model_dir)}},
            }
        )
    )
    port, grpc_port = free_port(), free_port()
    env = {**os.environ, "LLMRL_REDIS_URL": redis_url, "LLMRL_HOME": str(tmp_path)}
    process = subprocess.Popen(
        [sys.executable, "-m", "llmrl.cli", "serve", "llm_gateway", "--port", str(port),
         "--grpc-port", str(grpc_port), "--config", str(config)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.stdout.read()  # type: ignore[union-attr]
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the gateway did not come up"
            time.sleep(0.2)
        with connect(f"127.0.0.1:{grpc_port}") as client:
            first = client.chat("hello", max_tokens=3, run_id="svc")
            assert client.chat("hello", max_tokens=3, run_id="svc").cached  # Redis cache
        usage = httpx.get(f"http://127.0.0.1:{port}/v1/usage/svc").json()
        assert usage["cache_hits"] == 1 and usage["completion_tokens"] == first.completion_tokens
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, output
    assert "llm gateway stopped" in output


def test_print_models_lists_models_backends_and_prices(capsys, tmp_path):
    config = tmp_path / "models.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "models": {
                    "gpt-4o-mini": {"backend": "openai", "api_key_env": "OPENAI_API_KEY"},
                    "vicuna": {
                        "backend": "openai",
                        "base_url": "http://127.0.0.1:8000/v1",
                        "remote_model": "vicuna-7b-v1.5",
                        "fallback": "smollm2",
                    },
                }
            }
        )
    )
    print_models(str(config))
    out = capsys.readouterr().out
    for text in ("smollm2", "minilm", "vicuna", "gpt-4o-mini", "0.15", "fallback: smollm2"):
        assert text in out


def test_the_example_configuration_is_valid():
    from pathlib import Path

    from llmrl.llm_gateway.settings import load_settings

    example = Path(__file__).resolve().parents[2] / "configs" / "llm_gateway.yaml"
    settings = load_settings(config_file=example)
    assert settings.models["gpt-4o-mini"].fallback == "smollm2"
    assert settings.price("gpt-4o-mini").prompt == 0.15
    assert settings.models["smollm2"].backend == "hf"  # merged over the built-in model
