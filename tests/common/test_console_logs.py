"""An embedded run's warnings reach the terminal with their fields, secrets redacted."""

from __future__ import annotations

import subprocess
import sys

from support.processes import child_env

SECRET = "s3cret-token-value"


def _snippet(error: str) -> str:
    """A fresh process (no handlers yet, as `llmrl` starts) that logs a warning with `error`
    as its field, then an INFO event."""
    return f"""
import logging
from llmrl.common.logs import configure_console_logging, log_event
configure_console_logging()
log = logging.getLogger("llmrl.worker")
log_event(log, "episode error; retrying", logging.WARNING, error={error!r})
log_event(log, "played", episode=3)
"""


def _stderr_of(error: str, **env: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", _snippet(error)],
        capture_output=True,
        text=True,
        env=child_env(env),
        timeout=60,
        check=True,
    )
    return result.stderr


def test_a_warning_shows_its_fields_and_a_bearer_token_is_redacted():
    error = "TimeoutError: the gateway at http://x (Bearer abcdef123456) gave no answer"
    stderr = _stderr_of(error, LLMRL_LOG_LEVEL="")
    assert "llmrl.worker: episode error; retrying (error=TimeoutError: the gateway" in stderr
    assert "abcdef123456" not in stderr
    assert "Bearer [REDACTED]" in stderr
    assert "played" not in stderr  # INFO: below the console's default level


def test_the_level_follows_llmrl_log_level():
    stderr = _stderr_of("boom", LLMRL_LOG_LEVEL="info")
    assert "llmrl.worker: played (episode=3)" in stderr


def test_a_secret_environment_value_in_a_field_is_redacted():
    # no "Bearer" before it: only the secret-variable rule can hide it
    stderr = _stderr_of(f"refused with key {SECRET}", LLMRL_TOKEN=SECRET, LLMRL_LOG_LEVEL="")
    assert SECRET not in stderr
    assert "(error=refused with key [REDACTED])" in stderr
