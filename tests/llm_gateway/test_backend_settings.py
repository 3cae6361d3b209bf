"""Each backend declares its own settings model (issue 54, item 6): a model's entry is
validated by its backend's model where the configuration loads, errors name the model's key,
and a new backend brings a new setting without editing the gateway's settings module."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from llmrl.llm_gateway.errors import InvalidRequestError
from llmrl.llm_gateway.settings import load_settings


def test_each_model_is_typed_by_its_backend():
    settings = load_settings(
        {"models": {"remote": {"backend": "openai", "base_url": "http://127.0.0.1:1/v1"}}}
    )
    hf, embeddings, remote = (settings.models[n] for n in ("smollm2", "minilm", "remote"))
    assert (hf.backend, hf.dtype, hf.max_batch_size) == ("hf", "auto", 8)
    assert embeddings.path == "builtin:all-minilm-l6-v2"
    assert remote.provider_model("remote") == "remote" and not hasattr(remote, "dtype")
    dumped = settings.model_dump()["models"]  # each serialized with its own fields
    assert dumped["smollm2"]["max_batch_size"] == 8 and dumped["remote"]["base_url"]


@pytest.mark.parametrize(
    ("models", "named"),
    [
        ({"smollm2": {"dtype": "int4"}}, "models.smollm2.dtype"),
        ({"smollm2": {"max_batch_size": 0}}, "models.smollm2.max_batch_size"),
        ({"r": {"backend": "openai", "dtype": "float32"}}, "models.r.dtype: Extra inputs"),
        ({"e": {"backend": "sentence_transformers", "base_url": "x"}}, "models.e.base_url"),
        ({"x": {"backend": "nope"}}, "models.x.backend: unknown backend 'nope'"),
        ({"x": {"path": "somewhere"}}, "models.x.backend"),
        ({"smollm2": {"adapters": {"a/../b": {"1": "/tmp"}}}}, "models.smollm2.adapters"),
    ],
)
def test_a_bad_model_setting_names_its_key(models, named):
    with pytest.raises(InvalidRequestError, match="invalid gateway settings") as caught:
        load_settings({"models": models})
    assert named in str(caught.value)


def test_another_backend_under_a_built_in_name_replaces_its_keys():
    """The built-in smollm2 is hf; a user's smollm2 served by openai gets openai's keys
    only (a merge would give it hf's path and dtype, which openai does not take)."""
    settings = load_settings({"models": {"smollm2": {"backend": "openai", "base_url": "http://h"}}})
    assert settings.models["smollm2"].backend == "openai"
    assert settings.models["smollm2"].base_url == "http://h"


PLUGIN = """
from typing import Literal

from llmrl.common.registry import registry
from llmrl.llm_gateway.backends.base import Backend
from llmrl.llm_gateway.settings import ModelConfig


class EchoModelConfig(ModelConfig):
    backend: Literal["echo"] = "echo"
    greeting: str = "hello"


@registry.register_backend("echo", description="a plugin backend with its own setting")
class EchoBackend(Backend):
    ops = frozenset({"chat"})
    settings_model = EchoModelConfig
"""

CHECK = """
from llmrl.llm_gateway.errors import InvalidRequestError
from llmrl.llm_gateway.settings import GatewaySettings, load_settings

settings = load_settings({"models": {"e": {"backend": "echo", "greeting": "hi"}}})
print(type(settings.models["e"]).__name__, settings.models["e"].greeting)
try:
    load_settings({"models": {"e": {"backend": "echo", "greting": "hi"}}})
except InvalidRequestError as exc:
    print(exc)
print(type(GatewaySettings(models={"e": {"backend": "echo"}}).models["e"]).__name__)
"""


def test_a_new_backend_declares_its_own_setting(tmp_path):
    """A plugin backend (LLMRL_PLUGINS) brings its own setting: validated by its model,
    a misspelt key refused by name; the gateway's settings module is not edited."""
    (tmp_path / "echo_backend.py").write_text(PLUGIN)
    env = {**os.environ, "LLMRL_PLUGINS": "echo_backend", "PYTHONPATH": str(tmp_path)}
    run = subprocess.run(
        [sys.executable, "-c", CHECK], capture_output=True, text=True, env=env, check=True
    )
    typed, refused, built = run.stdout.strip().splitlines()
    assert typed == "EchoModelConfig hi"
    assert "models.e.greting: Extra inputs are not permitted" in refused
    assert built == "EchoModelConfig"  # settings built in code are typed the same way


def test_loading_the_settings_does_not_import_torch():
    """Backend modules are light: the hf backend imports torch when a model loads, so a
    process that only reads the configuration (`llmrl models`, a lean image) never does."""
    code = (
        "import sys; from llmrl.llm_gateway.settings import load_settings; "
        "s = load_settings(); assert type(s.models['smollm2']).__name__ == 'HfModelConfig'; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
