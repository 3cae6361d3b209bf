"""Where a result was measured: the machine, the packages and the code's commit a run records
(`llmrl.common.provenance`), and nothing that names the host or a user."""

from __future__ import annotations

import importlib.util
import platform
import shutil
import subprocess
from pathlib import Path

import pytest

from llmrl.common import provenance
from llmrl.common.provenance import describe, machine_provenance


def test_the_provenance_names_the_cpu_packages_and_commit_and_not_the_host():
    here = machine_provenance()
    assert here["cpu"] and here["cores"] >= 1 and here["python"] == platform.python_version()
    assert {"llmrl", "numpy"} <= set(here["packages"])
    text = repr(here)
    assert platform.node() not in text and str(Path.home()) not in text
    assert describe(here).startswith(f"{here['cpu']}, {here['cores']} cores")


@pytest.mark.skipif(
    platform.machine() != "x86_64" or not Path("/proc/cpuinfo").is_file(),
    reason="the ISA flags are read from Linux's /proc/cpuinfo on x86-64",
)
def test_the_provenance_says_which_kernel_choosing_features_the_cpu_has():
    """A model name ("Intel(R) Xeon(R) Processor") does not tell a Xeon with AVX512-BF16 from
    one without; the flags that choose kernels and the default precision do."""
    isa = machine_provenance()["isa"]
    assert set(isa) <= set(provenance.ISA_FLAGS)
    assert "avx2" in isa  # every x86-64 machine these tests meet; the pins rely on it
    flags = Path("/proc/cpuinfo").read_text().split("\nflags")[1].split("\n")[0].split()
    assert ("avx512_bf16" in isa) == ("avx512_bf16" in flags)


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_the_commit_is_the_checkouts_and_none_where_git_does_not_track_the_code(tmp_path):
    source = Path(provenance.__file__)
    checkout = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=source.parent, capture_output=True, text=True
    )
    if checkout.returncode == 0:  # run from a checkout, as the test suite is
        assert provenance.source_commit().split("+")[0] == checkout.stdout.strip()
    # the same module copied into another repository, untracked there (a wheel installed into
    # a venv inside some checkout): no commit, rather than that repository's
    other = tmp_path / "other"
    (other / "llmrl" / "common").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(other)], check=True)
    (other / "README").write_text("x")
    subprocess.run(["git", "-C", str(other), "add", "README"], check=True)
    subprocess.run(
        [
            "git",
            "-C",
            str(other),
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-qm",
            "x",
        ],
        check=True,
    )
    copy = other / "llmrl" / "common" / "provenance.py"
    shutil.copy(source, copy)
    spec = importlib.util.spec_from_file_location("copied_provenance", copy)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.source_commit() is None
