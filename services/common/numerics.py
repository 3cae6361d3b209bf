"""A run's numerics, stated: the precision its models compute in and the CPU code paths it pins.

Two things made the same seed give other figures on another machine, silently:
- **precision**: models ran in bf16 where the CPU computes it natively (AVX512-BF16, AMX) and
  in fp32 elsewhere, so an AMD EPYC and an Intel Xeon ran the same file in two precisions;
- **code paths**: MKL picks its GEMM kernels by CPU (AVX-512 on an Intel Xeon; on an AMD EPYC
  its own branch, whatever it is told but COMPATIBLE), and ATen's vectorised ops
  (`log_softmax`, ...) by the best ISA it finds; each path rounds differently.

`precision()` is the one process-wide choice every model follows where its own setting leaves
it open (the gateway's `dtype: auto`, a learner's `bf16: null`): `LLMRL_PRECISION`, default
`float32` on every machine; `bfloat16` asks for bf16 everywhere, `native` restores the old
per-machine choice (bf16 where native, else fp32), by name. `pin_cpu_paths()` fixes MKL's,
oneDNN's, ATen's, OpenBLAS's and numpy's own paths to AVX2, which every x86-64 CPU these runs
meet has; it must run before torch and numpy load, so the `llmrl` command calls it first and
child processes inherit it. A variable the user set wins. `adam_options()` is the Adam kernel every
optimiser llmrl builds takes (`LLMRL_ADAM`): torch's own choice, or its fused kernel, whose
square root is correctly rounded on every CPU (torch's own sends it to MKL's vector math, which
rounds it by CPU vendor). `numerics_provenance()` is what a run's results record.
"""

from __future__ import annotations

import os
from typing import Any, Literal

Precision = Literal["float32", "bfloat16", "native"]
PRECISION_ENV = "LLMRL_PRECISION"
PRECISIONS: tuple[str, ...] = ("float32", "bfloat16", "native")
DEFAULT_PRECISION: Precision = "float32"

# the CPU code paths pinned, and to what: read by MKL, oneDNN and ATen when torch loads
CPU_PINS = {
    "MKL_CBWR": "AVX2",  # MKL's conditional numerical reproducibility: one kernel path
    "ONEDNN_MAX_CPU_ISA": "AVX2",  # oneDNN's kernels (bf16 matmuls, some convolutions)
    "ATEN_CPU_CAPABILITY": "avx2",  # ATen's vectorised element-wise and reduction kernels
    # numpy's OpenBLAS picks its kernels by CPU too (SkylakeX on an AVX-512 Xeon, whose float32
    # GEMMs round otherwise than its Haswell ones: `llmrl numerics fingerprint` shows it)
    "OPENBLAS_CORETYPE": "Haswell",
    # numpy's own SIMD kernels (float64 `exp` and `log` among them) are dispatched by CPU too:
    # its AVX-512 group (X86_V4, numpy 2.4's name) rounds otherwise than its AVX2 one (X86_V3),
    # so an AVX-512 CPU and one without it part (2026-12-07: the one op of the fingerprint
    # apart between two AMD EPYCs). Disabling a group the CPU lacks is silently a no-op.
    "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR",
}
PIN_SWITCH_ENV = "LLMRL_PIN_CPU_PATHS"  # "0": leave every path to the libraries (fastest)
# cuBLAS keeps its GEMMs' reduction order fixed only with a fixed workspace (read when CUDA
# starts; harmless where there is none): torch's deterministic algorithms require it
GPU_PINS = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}


def precision() -> Precision:
    """The process's precision: $LLMRL_PRECISION, default float32; a ValueError names the
    variable and the allowed values when it holds anything else."""
    value = os.environ.get(PRECISION_ENV, "").strip() or DEFAULT_PRECISION
    if value not in PRECISIONS:
        raise ValueError(f"{PRECISION_ENV}: expected one of {', '.join(PRECISIONS)}, got {value!r}")
    return value  # type: ignore[return-value]


def computes_bf16(device: Any = "cpu") -> bool:
    """Whether a model whose own setting leaves precision open computes in bf16 on `device`."""
    chosen = precision()
    if chosen == "native":
        from llmrl.common.devices import native_bf16

        return native_bf16(device)
    return chosen == "bfloat16"


# Adam's kernel. `torch`: torch's own choice (on a CPU the per-tensor loop, whose square root
# goes to MKL's vector math: not correctly rounded, and rounded otherwise on an AMD EPYC than
# on an Intel Xeon even under MKL_CBWR=COMPATIBLE, `llmrl numerics fingerprint` shows it).
# `fused`: ATen's fused kernel, plain IEEE arithmetic in ATen's own vector code (the pinned
# AVX2 on every x86 CPU). Not the default: it changes the bits of every trained run kept
# before it.
ADAM_ENV = "LLMRL_ADAM"
ADAM_KERNELS: tuple[str, ...] = ("torch", "fused")
AdamKernel = Literal["torch", "fused"]


def adam_kernel() -> AdamKernel:
    """The process's Adam kernel: $LLMRL_ADAM, default `torch`; a ValueError names the
    variable and the allowed values when it holds anything else."""
    value = os.environ.get(ADAM_ENV, "").strip() or "torch"
    if value not in ADAM_KERNELS:
        raise ValueError(f"{ADAM_ENV}: expected one of {', '.join(ADAM_KERNELS)}, got {value!r}")
    return value  # type: ignore[return-value]


def adam_options() -> dict[str, Any]:
    """The keyword arguments that give `torch.optim.Adam` or `AdamW` the process's kernel
    (nothing for torch's own choice, so such a run keeps the bits it always had)."""
    return {"fused": True} if adam_kernel() == "fused" else {}


def pinning_on() -> bool:
    """Whether numerics are pinned ($LLMRL_PIN_CPU_PATHS is not "0")."""
    return os.environ.get(PIN_SWITCH_ENV, "1").strip() != "0"


def cpu_pins() -> dict[str, str]:
    """The CPU path pins a process pinned in this environment runs with: `CPU_PINS`, each
    variable the user set winning; none when pinning is off ($LLMRL_PIN_CPU_PATHS=0)."""
    if not pinning_on():
        return {}
    return {name: os.environ.get(name, value) for name, value in CPU_PINS.items()}


def pin_cpu_paths() -> None:
    """Set the CPU path pins (`cpu_pins()`, and the GPU's) this process and its children run
    with, unless the user set them or turned pinning off. Call before importing torch."""
    if not pinning_on():
        return
    for name, value in {**cpu_pins(), **GPU_PINS}.items():
        os.environ.setdefault(name, value)


def pin_gpu_numerics() -> None:
    """Before a model goes to a GPU: torch's deterministic algorithms (an op that has none
    warns rather than fails), cuDNN's benchmark autotuning off (it may pick another kernel
    from run to run) and TF32 off, so that float32 means float32 on an Ampere or later GPU.
    Unless pinning is turned off ($LLMRL_PIN_CPU_PATHS=0), as for the CPU paths."""
    if not pinning_on():
        return
    import torch

    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def numerics_provenance() -> dict[str, Any]:
    """What a run's numbers depend on besides its config and the CPU: the precision, the pins
    in effect, ATen's CPU capability and torch's thread count."""
    record: dict[str, Any] = {
        "precision": precision(),
        "pins": {name: os.environ[name] for name in CPU_PINS if name in os.environ},
        "adam": adam_kernel(),
    }
    try:
        import torch
    except ImportError:
        return record
    record["aten_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    record["torch_threads"] = torch.get_num_threads()
    if torch.cuda.is_available():  # a CPU-only run records nothing of a GPU
        record["gpu"] = {
            "name": torch.cuda.get_device_name(0),
            "cuda": torch.version.cuda,
            "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
            "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
            "tf32": bool(torch.backends.cuda.matmul.allow_tf32 or torch.backends.cudnn.allow_tf32),
        }
    return record


# a run's stated numerics, by their provenance key, and the variable that sets each
STATED_SETTINGS = {"precision": PRECISION_ENV, "adam": ADAM_ENV}


def numerics_changes(recorded: dict[str, Any], here: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(variable, recorded value, value here) for each stated setting (precision, Adam's
    kernel, each CPU path pin) that `recorded` (a run's `numerics_provenance()`) computed with
    and `here` does not. A run recorded before a setting was stated names none of it."""
    changes: list[tuple[str, Any, Any]] = [
        (variable, recorded[key], here.get(key))
        for key, variable in STATED_SETTINGS.items()
        if key in recorded and recorded[key] != here.get(key)
    ]
    if "pins" in recorded:
        there, mine = recorded.get("pins") or {}, here.get("pins") or {}
        changes += [
            (name, there.get(name), mine.get(name))
            for name in sorted({*there, *mine})
            if there.get(name) != mine.get(name)
        ]
    return changes


def listed_changes(changes: list[tuple[str, Any, Any]]) -> str:
    """`numerics_changes`' list in words: "LLMRL_ADAM torch there, fused here, ..."."""
    return ", ".join(f"{name} {there} there, {mine} here" for name, there, mine in changes)


def environment_of(recorded: dict[str, Any]) -> dict[str, str]:
    """The variables that give a process the numerics `recorded` (a run's
    `numerics_provenance()`) states: its precision, Adam kernel and each pin; a pin added since
    the run was made, empty (that library's own choice, as the run had it); pinning off where
    the run pinned nothing."""
    environment = {
        var: str(recorded[key]) for key, var in STATED_SETTINGS.items() if key in recorded
    }
    if "pins" in recorded:
        pins = recorded.get("pins") or {}
        if not pins:
            environment[PIN_SWITCH_ENV] = "0"
        else:
            environment |= {name: str(pins.get(name, "")) for name in sorted({*CPU_PINS, *pins})}
    return environment


def recorded_settings(recorded: dict[str, Any], changes: list[tuple[str, Any, Any]]) -> str:
    """Of `environment_of(recorded)`, the variables `changes` names (and the pin switch), as a
    command line starts with them: "LLMRL_ADAM=torch MKL_CBWR=AVX2"."""
    named = {name for name, _, _ in changes} | {PIN_SWITCH_ENV}
    return " ".join(
        f"{name}={value}" for name, value in environment_of(recorded).items() if name in named
    )


def precision_label(provenance: dict[str, Any]) -> str:
    """How a run's models computed, for a report: `fp32`, `bf16`, `bf16 where native`; for a
    run recorded before numerics were (no `numerics`), derived from its CPU, and saying so:
    those runs' models took bf16 on a CPU with AVX512-BF16 (the AMD EPYCs) and fp32 elsewhere
    (the Intel Xeons of those sessions, taken to lack it: their recorded model name does not
    say, and some Xeons have it), unless their experiment file fixed a dtype."""
    numerics = provenance.get("numerics")
    if numerics:
        label = {"float32": "fp32", "bfloat16": "bf16", "native": "bf16 where native"}
        text = label.get(numerics.get("precision"), str(numerics.get("precision")))
        text += ", CPU paths pinned" if numerics.get("pins") else ""
        return text + (", fused Adam" if numerics.get("adam") == "fused" else "")
    cpu = str(provenance.get("cpu") or "")
    if "AMD EPYC" in cpu:
        return "bf16 where native (derived from its CPU)"
    if cpu:
        return "fp32 (derived from its CPU)"
    return "precision unknown"
