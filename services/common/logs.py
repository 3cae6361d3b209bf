"""Structured (JSON-lines) logging for every service, with secrets redacted.

Secrets never reach logs: values of environment variables whose name looks secret
(`*_API_KEY`, `*_TOKEN`, `*SECRET*`, `*PASSWORD*`), bearer tokens and passwords in URLs
(`redis://:<password>@host`) are replaced by
`[REDACTED]` in every record, whatever logger produced it.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
from typing import Any

_SECRET_NAME = re.compile(r"(API_KEY|TOKEN|SECRET|PASSWORD)", re.IGNORECASE)
_BEARER = re.compile(r"(Bearer\s+)[A-Za-z0-9._~+/=-]+", re.IGNORECASE)
_OPENAI_KEY = re.compile(r"sk-[A-Za-z0-9_-]{8,}")
_URL_PASSWORD = re.compile(r"([a-z][a-z0-9+.-]*://[^:@/\s]*:)[^@/\s]+@", re.IGNORECASE)


def secret_values() -> list[str]:
    """Current values of secret-looking environment variables (long enough to be secrets)."""
    return [v for k, v in os.environ.items() if _SECRET_NAME.search(k) and len(v) >= 6]


def redact(text: str, secrets: list[str] | None = None) -> str:
    for value in secrets if secrets is not None else secret_values():
        text = text.replace(value, "[REDACTED]")
    text = _BEARER.sub(r"\1[REDACTED]", text)
    text = _URL_PASSWORD.sub(r"\1[REDACTED]@", text)  # redis://:<password>@host
    return _OPENAI_KEY.sub("[REDACTED]", text)


class JsonFormatter(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "service": self.service,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in getattr(record, "fields", {}).items():
            entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return redact(json.dumps(entry, default=str))


class ConsoleFormatter(logging.Formatter):
    """One readable line for a person at a terminal: `logger: msg (key=value, ...)`, its
    structured fields kept (they say what failed), secrets redacted as in the JSON lines."""

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "fields", {})
        text = f"{record.name}: {record.getMessage()}"
        if fields:
            text += " (" + ", ".join(f"{key}={value}" for key, value in fields.items()) + ")"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return redact(text)


def _level(level: str | None, default: str) -> str:
    """The root level: `level`, else $LLMRL_LOG_LEVEL, else `default`."""
    return (level or os.environ.get("LLMRL_LOG_LEVEL") or default).upper()


def configure_console_logging(level: str | None = None) -> None:
    """Warnings and errors of an embedded run on stderr with their fields (Python's fallback
    prints the message alone: `episode error; retrying`, not the error); level from
    LLMRL_LOG_LEVEL (default WARNING). A service's `configure_logging` replaces it; where
    handlers are already set (a host program's, pytest's) it adds none."""
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(ConsoleFormatter())
    root.addHandler(handler)
    root.setLevel(_level(level, "WARNING"))


def configure_logging(service: str, level: str | None = None) -> logging.Logger:
    """JSON lines on stderr for `service`; level from LLMRL_LOG_LEVEL (default INFO)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(service))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(_level(level, "INFO"))
    return logging.getLogger(f"llmrl.{service}")


def log_event(logger: logging.Logger, msg: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log `msg` with structured fields (they become keys of the JSON line)."""
    logger.log(level, msg, extra={"fields": fields})
