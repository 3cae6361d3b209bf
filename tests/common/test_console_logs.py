"""An embedded run's warnings reach the terminal with their fields, secrets redacted."""

from __future__ import annotations

import os
import subprocess
import sys

SNIPPET = """
import logging
from llmrl.common.logs import configure_console_logging, log_event
configure_console_logging()
log = logging.getLogger("llmrl.worker")
log_event(log, "episode error; retrying", logging.WARNING,
          error="TimeoutError: the gateway at http://x (Bearer abcdef123456) gave no answer")
log_event(log, "played", episode=3)  # INFO: below the console's default level
"""


def _stderr_of(snippet: str, **env: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", snippet],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=60,
        check=True,
    )
    return result.stderr


def test_a_warning_shows_its_fields_with_secrets_redacted():
    stderr = _stderr_of(SNIPPET, LLMRL_TOKEN="s3cret-token-value", LLMRL_LOG_LEVEL="")
    assert "llmrl.worker: episode error; retrying (error=TimeoutError: the gateway" in stderr
    assert "abcdef123456" not in stderr
    assert "Bearer [REDACTED]" in stderr
    assert "played" not in stderr


def test_the_level_follows_llmrl_log_level():
    stderr = _stderr_of(SNIPPET, LLMRL_LOG_LEVEL="info")
    assert "llmrl.worker: played (episode=3)" in stderr


def test_a_secret_value_in_a_field_is_redacted():
    snippet = SNIPPET.replace("abcdef123456", "s3cret-token-value")
    stderr = _stderr_of(snippet, LLMRL_TOKEN="s3cret-token-value", LLMRL_LOG_LEVEL="")
    assert "s3cret-token-value" not in stderr
    assert "[REDACTED]" in stderr
