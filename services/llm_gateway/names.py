"""What a model reference may look like: `<model>` or `<model>:<adapter>@<version>`.

Adapter names and versions become folder names under the adapters folder, so each part is held
to a strict pattern (letters, digits, `_`, `.`, `-`; never `.` or `..` alone nor a `..` inside)
before anything is looked up on disk: a reference cannot walk out of that folder.
"""

from __future__ import annotations

from llmrl.common.names import is_safe_name
from llmrl.llm_gateway.errors import InvalidRequestError

ADAPTER_FORMAT = "<model>:<adapter>@<version> (each part letters, digits, '_', '.', '-')"


def check_adapter(adapter: str, field: str = "model") -> tuple[str, str]:
    """`<adapter>@<version>` → (adapter, version), or InvalidRequestError naming `field`."""
    name, at, version = adapter.partition("@")
    if not at or not is_safe_name(name) or not is_safe_name(version):
        raise InvalidRequestError(
            f"{field}: an adapter is addressed as {ADAPTER_FORMAT}; got adapter {adapter[:200]!r}",
            field,
        )
    return name, version
