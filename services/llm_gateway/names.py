"""What a model reference may look like: `<model>` or `<model>:<adapter>@<version>`.

Adapter names and versions become folder names under the adapters folder, so each part is held
to a strict pattern (letters, digits, `_`, `.`, `-`; never `.` or `..` alone nor a `..` inside)
before anything is looked up on disk: a reference cannot walk out of that folder.
"""

from __future__ import annotations

import re

from llmrl.llm_gateway.errors import InvalidRequestError

NAME_PART = re.compile(r"[A-Za-z0-9_.-]{1,128}")
ADAPTER_FORMAT = "<model>:<adapter>@<version> (each part letters, digits, '_', '.', '-')"


def is_safe_name(part: str) -> bool:
    """True when `part` matches NAME_PART and holds no `..` (so it is one plain folder name)."""
    return bool(NAME_PART.fullmatch(part)) and ".." not in part and part != "."


def check_adapter(adapter: str, field: str = "model") -> tuple[str, str]:
    """`<adapter>@<version>` → (adapter, version), or InvalidRequestError naming `field`."""
    name, at, version = adapter.partition("@")
    if not at or not is_safe_name(name) or not is_safe_name(version):
        raise InvalidRequestError(
            f"{field}: an adapter is addressed as {ADAPTER_FORMAT}; got adapter {adapter[:200]!r}",
            field,
        )
    return name, version
