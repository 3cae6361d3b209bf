"""The OpenAI chat fine-tuning format checks."""

from __future__ import annotations

import pytest

from llmrl.common.chat_format import chat_example_errors, chat_jsonl_errors, write_chat_jsonl

SYSTEM = {"role": "system", "content": "be tidy"}
USER = {"role": "user", "content": "where?"}
ASSISTANT = {"role": "assistant", "content": "1. go to room kitchen_0"}


def test_valid_examples():
    assert chat_example_errors({"messages": [SYSTEM, USER, ASSISTANT]}) == []
    assert chat_example_errors({"messages": [USER, ASSISTANT, USER, ASSISTANT]}) == []
    assert chat_example_errors({"messages": [USER, {**ASSISTANT, "weight": 0}]}) == []


@pytest.mark.parametrize(
    ("messages", "problem"),
    [
        ([], "non-empty list"),
        ([USER], "last message must be an assistant"),
        ([SYSTEM, ASSISTANT], "expected a user message"),
        ([USER, USER, ASSISTANT], "expected an assistant message"),
        ([USER, SYSTEM, ASSISTANT], "system message may only come first"),
        ([{"role": "robot", "content": "x"}, ASSISTANT], "role must be one of"),
        ([USER, {"role": "assistant", "content": "  "}], "non-empty string"),
        ([USER, {"role": "assistant", "content": 3}], "non-empty string"),
        ([{**USER, "weight": 1}, ASSISTANT], "weight is only allowed"),
        (["hello", ASSISTANT], "must be an object"),
    ],
)
def test_invalid_examples_are_explained(messages, problem):
    errors = chat_example_errors({"messages": messages})
    assert any(problem in error for error in errors), errors


def test_write_refuses_invalid_examples_and_files_are_checked_line_by_line(tmp_path):
    path = tmp_path / "data.jsonl"
    with pytest.raises(ValueError, match="example 1"):
        write_chat_jsonl(path, [[USER, ASSISTANT], [USER]])
    assert not path.exists()
    assert write_chat_jsonl(path, [[SYSTEM, USER, ASSISTANT], [USER, ASSISTANT]]) == 2
    assert chat_jsonl_errors(path) == []
    with open(path, "a") as handle:
        handle.write('{"messages": [{"role": "user", "content": "x"}]}\nnot json\n')
    errors = chat_jsonl_errors(path)
    assert errors[0].startswith("line 3:") and errors[1].startswith("line 4: not JSON")
