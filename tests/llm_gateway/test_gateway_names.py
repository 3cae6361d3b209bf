"""Model references and configured adapter names: one strict pattern, no path can leave the
adapters folder (the REST answers are in test_gateway_rest.py)."""

from __future__ import annotations

import pytest

from llmrl.llm_gateway.errors import InvalidRequestError
from llmrl.llm_gateway.names import check_adapter, is_safe_name
from llmrl.llm_gateway.settings import load_settings


@pytest.mark.parametrize("part", ["..", ".", "a/b", "a..b", "", "x" * 129, "a\x00", "é", "a\n"])
def test_parts_that_could_name_another_folder_are_not_safe(part):
    assert not is_safe_name(part)


def test_adapter_references_split_into_safe_parts():
    assert check_adapter("glam@1.2") == ("glam", "1.2")
    with pytest.raises(InvalidRequestError, match=r"^model: an adapter is addressed") as caught:
        check_adapter("../../../etc@passwd")
    assert caught.value.field == "model"


def test_configured_adapter_names_follow_the_same_pattern():
    model = {"backend": "hf", "path": "unused", "adapters": {"glam": {"..": "/tmp/x"}}}
    with pytest.raises(InvalidRequestError, match=r"models\.tiny\.adapters: '\.\.' is not a plain"):
        load_settings({"models": {"tiny": model}})


def test_a_patient_config_lengthens_a_built_in_models_timeout_unless_the_user_set_one(
    tmp_path, monkeypatch
):
    from llmrl.llm_gateway.settings import CONFIG_ENV_VAR, load_settings, use_patient_config

    monkeypatch.delenv(CONFIG_ENV_VAR, raising=False)
    written = use_patient_config(tmp_path, "smollm2", 900, dtype="float32", torch_threads=1)
    assert written == tmp_path / "gateway.yaml"
    settings = load_settings()  # reads the variable, as every gateway of the process does
    model = settings.model("smollm2")
    assert model.timeout_s == 900 and model.dtype == "float32" and settings.torch_threads == 1
    assert model.backend == "hf"  # the built-in entry's other keys are kept
    # the user's config wins, and a model the defaults do not know is left alone
    assert use_patient_config(tmp_path / "again", "smollm2", 5) is None
    monkeypatch.delenv(CONFIG_ENV_VAR)
    assert use_patient_config(tmp_path / "other", "gpt-x", 5) is None
    assert not (tmp_path / "other").exists()
