"""The Redis `llmrl up` starts requires a password: kept in an owner-only config file (not on
the command line), handed to every process in LLMRL_REDIS_URL, masked where it is printed and
redacted from the services' logs."""

from __future__ import annotations

import stat

import pytest
import redis
from rich.console import Console
from support.net import free_port

from llmrl.common.logs import redact
from llmrl.orchestrator.launcher import (
    REDIS_PASSWORD_VAR,
    Launcher,
    check_redis_password,
    masked_url,
    plan_processes,
    redis_spec,
    start_redis,
)

PASSWORD = "redis-pa55word-for-tests"


def test_the_launchers_redis_refuses_clients_without_its_password(tmp_path):
    launcher = Launcher(tmp_path, Console(file=None, quiet=True))
    spec = redis_spec(tmp_path, free_port(), PASSWORD)
    try:
        url, proc = start_redis(launcher, spec)
        assert proc.poll() is None
        assert redis.Redis.from_url(url).ping()  # the URL carries the password
        anonymous = url.replace(f":{PASSWORD}@", "")
        with pytest.raises(redis.AuthenticationError):
            redis.Redis.from_url(anonymous).ping()
        with pytest.raises(redis.AuthenticationError):
            redis.Redis.from_url(url.replace(PASSWORD, "wrong-password-1234")).ping()
        assert PASSWORD not in " ".join(spec.argv())  # `ps` does not show it
        (config,) = (tmp_path / "redis").glob("*.conf")
        assert stat.S_IMODE(config.stat().st_mode) == 0o600
        assert PASSWORD not in masked_url(url) and ":***@" in masked_url(url)
    finally:
        launcher.stop_all()
    assert PASSWORD not in (tmp_path / "logs" / "redis.log").read_text()


def test_every_process_gets_the_url_and_its_logs_redact_the_password(tmp_path, monkeypatch):
    url = f"redis://:{PASSWORD}@127.0.0.1:6390/0"
    specs, _ = plan_processes(1, url, tmp_path, Console(quiet=True), "tok", PASSWORD)
    assert specs and all(spec.env["LLMRL_REDIS_URL"] == url for spec in specs)
    assert all(spec.env[REDIS_PASSWORD_VAR] == PASSWORD for spec in specs)
    # a log line that shows the URL: redacted by its form, and by the variable's value
    assert PASSWORD not in redact(f"connecting to {url}", secrets=[])
    monkeypatch.setenv(REDIS_PASSWORD_VAR, PASSWORD)
    assert PASSWORD not in redact(f"password is {PASSWORD}")


@pytest.mark.parametrize("password", ["short", 'has"quote-and-more-chars', "white space 1234567"])
def test_a_weak_or_unquotable_redis_password_is_refused(password):
    with pytest.raises(SystemExit, match=REDIS_PASSWORD_VAR):
        check_redis_password(password)
