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
