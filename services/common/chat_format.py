"""The OpenAI chat fine-tuning format: writing and checking `{"messages": [...]}` JSONL files.

A valid example (one JSON object per line) has a `messages` list of `{"role", "content"}`
objects: an optional system message first, then user and assistant messages alternating
(user first), ending with an assistant message, every content a non-empty string. Assistant
messages may carry `"weight": 0 | 1` (OpenAI's per-message training switch).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from llmrl.common.safe_write import write_text

ROLES = ("system", "user", "assistant")
TOP_LEVEL_KEYS = {"messages", "tools", "parallel_tool_calls", "functions"}


def chat_example_errors(example: Any) -> list[str]:
    """Why `example` is not a valid chat fine-tuning example ([] when it is)."""
    if not isinstance(example, dict):
        return [f"an example must be a JSON object, got {type(example).__name__}"]
    errors = [f"unknown key {key!r}" for key in example if key not in TOP_LEVEL_KEYS]
    messages = example.get("messages")
    if not isinstance(messages, list) or not messages:
        return [*errors, "'messages' must be a non-empty list"]
    expected_next = "user"
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            errors.append(f"{where} must be an object")
            continue
        role, content = message.get("role"), message.get("content")
        extra = set(message) - {"role", "content", "weight", "name"}
        if extra:
            errors.append(f"{where} has unknown keys {sorted(extra)}")
        if role not in ROLES:
            errors.append(f"{where}.role must be one of {', '.join(ROLES)}, got {role!r}")
            continue
        if not isinstance(content, str) or not content.strip():
            errors.append(f"{where}.content must be a non-empty string")
        if "weight" in message and (role != "assistant" or message["weight"] not in (0, 1)):
            errors.append(f"{where}.weight is only allowed on assistant messages, as 0 or 1")
        if role == "system":
            if i != 0:
                errors.append(f"{where}: a system message may only come first")
            continue
        if role != expected_next:
            article = "an" if expected_next == "assistant" else "a"
            errors.append(f"{where}: expected {article} {expected_next} message, got {role}")
        expected_next = "assistant" if role == "user" else "user"
    last = messages[-1]
    if isinstance(last, dict) and last.get("role") != "assistant":
        errors.append("the last message must be an assistant message (the training target)")
    return errors


def write_chat_jsonl(
    path: str | Path,
    examples: Iterable[list[dict[str, str]]],
    *,
    field: str = "path",
    roots: Iterable[Path] | None = None,
) -> int:
    """Write examples (each a message list) as chat fine-tuning JSONL; returns the count.

    Every example is checked first: an invalid one raises ValueError naming what is wrong,
    and nothing half-written is left behind. The file is written through no link planted at
    its name (`llmrl.common.safe_write`); with `roots`, its folder must really lie under one
    (else `PathOutsideRootsError` naming `field`).
    """
    lines = []
    for number, messages in enumerate(examples):
        record = {"messages": messages}
        errors = chat_example_errors(record)
        if errors:
            raise ValueError(f"example {number} is not valid chat data: {'; '.join(errors)}")
        lines.append(json.dumps(record, ensure_ascii=False))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, "".join(line + "\n" for line in lines), field=field, roots=roots)
    return len(lines)


def chat_jsonl_errors(path: str | Path) -> list[str]:
    """Every problem of a chat fine-tuning JSONL file, as `line N: ...` ([] when valid)."""
    errors: list[str] = []
    count = 0
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                errors.append(f"line {number}: empty line")
                continue
            try:
                example = json.loads(line)
            except json.JSONDecodeError as exc:
                errors.append(f"line {number}: not JSON ({exc.msg})")
                continue
            count += 1
            errors.extend(f"line {number}: {error}" for error in chat_example_errors(example))
    if count == 0 and not errors:
        errors.append("the file holds no examples")
    return errors
