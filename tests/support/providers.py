"""Configure model providers for a test: services read them from the file named by
$LLMRL_PROVIDERS (llmrl.common.providers), never from requests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml


def configure_providers(
    monkeypatch: pytest.MonkeyPatch, folder: Path, **providers: dict[str, Any]
) -> Path:
    """Write `providers` ({name: {base_url, api_key_env}}) to a file and point
    $LLMRL_PROVIDERS at it for the rest of the test; returns the file."""
    path = folder / "providers.yaml"
    path.write_text(yaml.safe_dump({"providers": providers}))
    monkeypatch.setenv("LLMRL_PROVIDERS", str(path))
    return path
