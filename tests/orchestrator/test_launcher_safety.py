"""`llmrl up` leaves no orphans and does not collide: the launcher's children die when it is
SIGKILLed; a taken port stops it before it starts anything, naming the port and its holder;
every planned process gets the shared token."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

from rich.console import Console
from support.net import free_port
from support.processes import REPO, child_env, wait_until

from llmrl.orchestrator.launcher import plan_processes
from llmrl.orchestrator.launcher_safety import port_holder

# A launcher in its own process starting one long sleeper the way `llmrl up` starts services.
LAUNCHER_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from rich.console import Console
    from llmrl.orchestrator.launcher import Launcher, ProcessSpec

    launcher = Launcher(Path(sys.argv[1]), Console())
    child = launcher.start(ProcessSpec("sleeper", ["600"], program="sleep"))
    print(child.pid, flush=True)
    time.sleep(600)
    """
)


def _gone(pid: int) -> bool:
    """Exited: no such process, or a zombie nobody has reaped yet."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def test_children_die_when_the_launcher_is_sigkilled(tmp_path):
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER_SCRIPT, str(tmp_path)],
        env=child_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    child_pid = int(launcher.stdout.readline())
    try:
        assert not _gone(child_pid)
        launcher.send_signal(signal.SIGKILL)
        launcher.wait(10)
        wait_until(lambda: _gone(child_pid), 10, "the launcher's child to die with it")
    finally:
        if not _gone(child_pid):
            os.kill(child_pid, signal.SIGKILL)
        launcher.stdout.close()


def test_a_taken_port_is_refused_naming_it_and_its_holder(tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        assert port_holder(port).startswith(f"pid {os.getpid()} (")
        env = child_env(
            {"LLMRL_ORCHESTRATOR_PORT": str(port), "LLMRL_WORKER_PORT": str(free_port())}
        )
        up = subprocess.run(
            [sys.executable, "-m", "llmrl.cli", "up", "--workers", "1", "--home", str(tmp_path),
             "--redis-url", "redis://127.0.0.1:1/0"],
            env=env, cwd=REPO, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert up.returncode != 0
    assert f"port {port} (orchestrator HTTP) is taken by pid {os.getpid()} (" in up.stderr
    assert not (tmp_path / "logs").exists()  # refused before starting anything


def test_every_planned_process_gets_the_token(tmp_path):
    specs, _ = plan_processes(2, "redis://127.0.0.1:1/0", tmp_path, Console(), "shared-t0ken")
    assert specs and all(spec.env["LLMRL_TOKEN"] == "shared-t0ken" for spec in specs)
    assert all(spec.ports for spec in specs)
