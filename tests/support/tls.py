"""A self-signed certificate for 127.0.0.1/localhost, made with the openssl CLI (the
`cryptography` package is not a dependency), and the environment that serves and trusts it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest


def self_signed(folder: Path) -> tuple[Path, Path]:
    """(certificate, key) PEM files in `folder`, valid for a day."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def use_tls(monkeypatch: pytest.MonkeyPatch, folder: Path) -> Path:
    """Servers present a fresh self-signed certificate and clients trust it; returns it."""
    cert, key = self_signed(folder)
    monkeypatch.setenv("LLMRL_TLS_CERT", str(cert))
    monkeypatch.setenv("LLMRL_TLS_KEY", str(key))
    monkeypatch.setenv("LLMRL_TLS_CA", str(cert))
    return cert
