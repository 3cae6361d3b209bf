"""A run's numerics are stated: one precision on every machine unless set, the CPU code paths
pinned in child processes, and both recorded with the run."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from llmrl.common import numerics


def test_precision_is_float32_on_every_machine_unless_set(monkeypatch):
    monkeypatch.delenv(numerics.PRECISION_ENV, raising=False)
    assert numerics.precision() == "float32"
    assert numerics.computes_bf16("cpu") is False  # whatever this CPU's flags
    monkeypatch.setenv(numerics.PRECISION_ENV, "bfloat16")
    assert numerics.computes_bf16("cpu") is True
    monkeypatch.setenv(numerics.PRECISION_ENV, "native")
    from llmrl.common.devices import native_bf16

    assert numerics.computes_bf16("cpu") is native_bf16("cpu")
    monkeypatch.setenv(numerics.PRECISION_ENV, "fp8")
    with pytest.raises(ValueError, match="LLMRL_PRECISION: expected one of float32, bfloat16"):
        numerics.precision()


def test_the_gateway_and_learner_follow_the_stated_precision(monkeypatch):
    import torch

    from llmrl.llm_gateway.local_causal_lm import resolve_dtype

    monkeypatch.delenv(numerics.PRECISION_ENV, raising=False)
    assert resolve_dtype("auto", torch.device("cpu")) is torch.float32
    assert resolve_dtype("bfloat16", torch.device("cpu")) is torch.bfloat16  # a file's own say
    monkeypatch.setenv(numerics.PRECISION_ENV, "bfloat16")
    assert resolve_dtype("auto", torch.device("cpu")) is torch.bfloat16


def test_the_llmrl_command_pins_the_cpu_paths_for_itself_and_its_children():
    pins = {**numerics.CPU_PINS, **numerics.GPU_PINS}
    env = {k: v for k, v in os.environ.items() if k not in pins}
    shown = (
        "MKL_CBWR",
        "ATEN_CPU_CAPABILITY",
        "OPENBLAS_CORETYPE",
        "NPY_DISABLE_CPU_FEATURES",
        "CUBLAS_WORKSPACE_CONFIG",
    )
    code = (
        "import os, sys\n"
        "from click.testing import CliRunner\n"
        "from llmrl.cli import main\n"
        "CliRunner().invoke(main, ['envs'])\n"
        f"print({{k: os.environ.get(k) for k in {shown!r}}})\n"
        "import numpy, torch\n"
        "print(torch.backends.cpu.get_cpu_capability())\n"
        "print(numpy._core._multiarray_umath.__cpu_features__['X86_V4'])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    printed, capability, numpy_avx512 = done.stdout.strip().splitlines()[-3:]
    assert printed == str(
        {
            "MKL_CBWR": "AVX2",
            "ATEN_CPU_CAPABILITY": "avx2",
            "OPENBLAS_CORETYPE": "Haswell",  # numpy's BLAS
            "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR",  # numpy's own kernels
            "CUBLAS_WORKSPACE_CONFIG": ":4096:8",  # read only where a GPU computes
        }
    )
    assert capability == "AVX2"  # ATen took the pinned path, whatever this CPU offers
    assert numpy_avx512 == "False"  # numpy's AVX-512 kernels are off, on an AVX-512 CPU too
    env[numerics.PIN_SWITCH_ENV] = "0"
    unpinned = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert unpinned.stdout.strip().splitlines()[-3] == str(dict.fromkeys(shown))


def test_a_user_set_pin_wins_and_is_recorded(monkeypatch):
    monkeypatch.setenv("MKL_CBWR", "COMPATIBLE")
    monkeypatch.delenv(numerics.PIN_SWITCH_ENV, raising=False)
    numerics.pin_cpu_paths()
    assert os.environ["MKL_CBWR"] == "COMPATIBLE"
    record = numerics.numerics_provenance()
    assert record["pins"]["MKL_CBWR"] == "COMPATIBLE"
    assert record["precision"] in numerics.PRECISIONS and record["torch_threads"] >= 1


def test_runs_recorded_before_numerics_were_say_their_precision_was_derived():
    assert numerics.precision_label({"cpu": "AMD EPYC 9B14"}).startswith("bf16 where native")
    assert numerics.precision_label({"cpu": "Intel(R) Xeon(R) CPU"}).startswith("fp32 (derived")
    recorded = {"cpu": "AMD EPYC", "numerics": {"precision": "float32", "pins": {"A": "1"}}}
    assert numerics.precision_label(recorded) == "fp32, CPU paths pinned"
    recorded["numerics"]["adam"] = "fused"
    assert numerics.precision_label(recorded) == "fp32, CPU paths pinned, fused Adam"


def test_a_cpu_only_run_records_no_gpu_and_a_gpu_run_its_pinned_kernels():
    import torch

    from llmrl.common.devices import resolve_device

    record = numerics.numerics_provenance()
    if not torch.cuda.is_available():
        assert "gpu" not in record
        assert resolve_device("auto").type == "cpu"
        assert not torch.are_deterministic_algorithms_enabled(), "nothing changes on a CPU"
        return
    resolve_device("cuda")  # placing a model on the GPU pins its numerics first
    gpu = numerics.numerics_provenance()["gpu"]
    assert gpu["deterministic_algorithms"] and not gpu["tf32"]
    assert gpu["cublas_workspace_config"] == numerics.GPU_PINS["CUBLAS_WORKSPACE_CONFIG"]


def test_adams_kernel_is_torchs_own_unless_set_and_recorded(monkeypatch):
    monkeypatch.delenv(numerics.ADAM_ENV, raising=False)
    assert numerics.adam_kernel() == "torch" and numerics.adam_options() == {}
    assert numerics.numerics_provenance()["adam"] == "torch"
    monkeypatch.setenv(numerics.ADAM_ENV, "fused")
    assert numerics.adam_options() == {"fused": True}
    assert numerics.numerics_provenance()["adam"] == "fused"
    monkeypatch.setenv(numerics.ADAM_ENV, "apex")
    with pytest.raises(ValueError, match="LLMRL_ADAM: expected one of torch, fused, got 'apex'"):
        numerics.adam_kernel()


def test_the_llmrl_command_refuses_a_bad_numerics_variable_naming_it(monkeypatch):
    from click.testing import CliRunner

    from llmrl.cli import main

    monkeypatch.setenv(numerics.ADAM_ENV, "apex")
    refused = CliRunner().invoke(main, ["envs"])
    assert refused.exit_code == 2
    assert "LLMRL_ADAM: expected one of torch, fused, got 'apex'" in refused.output
    monkeypatch.setenv(numerics.ADAM_ENV, "fused")
    assert CliRunner().invoke(main, ["envs"]).exit_code == 0


def test_a_recorded_runs_numerics_give_the_variables_that_repeat_them():
    recorded = {
        "precision": "float32",
        "adam": "fused",
        "pins": {"MKL_CBWR": "COMPATIBLE", "ATEN_CPU_CAPABILITY": "avx2"},
    }
    environment = numerics.environment_of(recorded)
    assert environment["LLMRL_ADAM"] == "fused" and environment["MKL_CBWR"] == "COMPATIBLE"
    # a pin added since the run was made: empty, that library's own choice, as the run had it
    assert environment["NPY_DISABLE_CPU_FEATURES"] == ""
    assert numerics.environment_of({"pins": {}}) == {numerics.PIN_SWITCH_ENV: "0"}
    here = {"precision": "float32", "adam": "torch", "pins": numerics.cpu_pins()}
    changes = numerics.numerics_changes(recorded, here)
    assert ("LLMRL_ADAM", "fused", "torch") in changes
    told = numerics.recorded_settings(recorded, changes)
    assert "LLMRL_ADAM=fused" in told and "MKL_CBWR=COMPATIBLE" in told
    assert "NPY_DISABLE_CPU_FEATURES= " in f"{told} " and "LLMRL_PRECISION" not in told
