"""Where a result was measured: the machine and the software a run ran on.

A run's `results.json` carries this (`Results.provenance`), and so does every run a stored
report keeps, because the same seed does not always give the same figure on another machine:
a LoRA fine-tune's float results follow the CPU's kernels, and a figure that does not repeat
should say where it came from. Nothing here names the host, a user or a path.
"""

from __future__ import annotations

import os
import platform
import subprocess
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = ("llmrl", "torch", "transformers", "numpy")
# the CPU features that choose kernels and the default precision: a model name such as
# "Intel(R) Xeon(R) Processor" does not say which generation ran a run
ISA_FLAGS = ("fma", "avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_bf16")
SOURCE_DIR = Path(__file__).resolve().parent.parent


def cpu_model() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo), else what `platform` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def isa_flags() -> list[str]:
    """Which of ISA_FLAGS this CPU has (Linux: /proc/cpuinfo; elsewhere none are listed)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            flags = next((line for line in cpuinfo if line.startswith("flags")), "")
    except OSError:
        return []
    present = set(flags.partition(":")[2].split())
    return [flag for flag in ISA_FLAGS if flag in present]


def usable_cores() -> int | None:
    """The cores this process may run on (a container's or taskset's limit), not the host's."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count()


def package_versions() -> dict[str, str]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def source_commit() -> str | None:
    """The git commit of the checkout the code runs from (with `+changes` when its tracked
    files differ from it); None outside a checkout (an image, a wheel installed anywhere, even
    inside another repository: this very file must be one git tracks) or without git."""
    try:

        def git(*args: str, cwd: Path = SOURCE_DIR) -> str:
            return subprocess.run(
                ["git", *args],
                cwd=cwd,
                capture_output=True,
                text=True,
                timeout=10,
                check=True,
            ).stdout.strip()

        git("ls-files", "--error-unmatch", Path(__file__).name, cwd=Path(__file__).parent)
        commit = git("rev-parse", "HEAD")
        changed = git("status", "--porcelain", "--untracked-files=no", "--", ".")
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("+changes" if changed else "") if commit else None


@cache
def machine_provenance() -> dict[str, Any]:
    """The CPU, its cores, the OS, Python and the packages a run measured with, and the
    code's commit; the same for the whole process, so computed once."""
    return {
        "cpu": cpu_model(),
        "isa": isa_flags(),
        "cores": usable_cores(),
        "system": f"{platform.system()} {platform.release()} {platform.machine()}",
        "python": platform.python_version(),
        "packages": package_versions(),
        "commit": source_commit(),
    }


def describe(provenance: dict[str, Any]) -> str:
    """One line a report prints: `<cpu>, <n> cores, <precision>, torch <v>, llmrl <commit>`
    (the precision derived from the CPU, and saying so, for runs recorded before it was)."""
    from llmrl.common.numerics import precision_label

    parts = [str(provenance.get("cpu") or "unknown CPU")]
    if provenance.get("cores"):
        parts.append(f"{provenance['cores']} cores")
    parts.append(precision_label(provenance))
    packages = provenance.get("packages") or {}
    if "torch" in packages:
        parts.append(f"torch {packages['torch']}")
    if provenance.get("commit"):
        sha, plus, changes = provenance["commit"].partition("+")
        parts.append(f"llmrl {sha[:7]}{plus}{changes}")
    return ", ".join(parts)
