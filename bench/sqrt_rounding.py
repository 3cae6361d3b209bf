"""How correctly torch rounds `sqrt` on this CPU under each MKL branch: the share of 100,000
float32 roots (of |randn|, seeded) that equal numpy's correctly rounded ones, and the largest
distance in units in the last place. torch sends a float tensor's `sqrt` to MKL's vector math;
its rounding is what parts torch's default Adam between an AMD EPYC and an Intel Xeon
(docs/concepts.md, "Across CPUs"), where `llmrl numerics fingerprint` only says that the bits
differ.

Each MKL setting runs in its own process (MKL reads its branch once, when it loads), with the
other pins as the `llmrl` command sets them (ATen's AVX2 capability among them):

    python bench/sqrt_rounding.py

The last line is one JSON object: the CPU, and per setting the share and the largest ulp.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

from llmrl.common.numerics import CPU_PINS

SETTINGS = {"AVX2 (llmrl's pin)": "AVX2", "COMPATIBLE": "COMPATIBLE", "AVX512": "AVX512"}
MEASURE = """
import json
from llmrl.common.numerics import pin_cpu_paths
pin_cpu_paths()
import numpy as np
import torch
generator = torch.Generator().manual_seed(0)
roots = torch.randn(100_000, generator=generator).abs()
here, reference = torch.sqrt(roots).numpy(), np.sqrt(roots.numpy())
ulps = np.abs(here.view(np.int32).astype(np.int64) - reference.view(np.int32))
print(json.dumps({"correctly_rounded": float(np.mean(ulps == 0)), "max_ulp": int(ulps.max())}))
"""


def measure(mkl_branch: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k not in CPU_PINS}
    env["MKL_CBWR"] = mkl_branch
    done = subprocess.run(
        [sys.executable, "-c", MEASURE], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"MKL_CBWR={mkl_branch}: the measuring process failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    from llmrl.common.provenance import cpu_model

    results = {name: measure(branch) for name, branch in SETTINGS.items()}
    for name, result in results.items():
        print(f"MKL_CBWR={SETTINGS[name]:<11} {result['correctly_rounded']:.2%} correctly rounded")
    print(json.dumps({"cpu": cpu_model(), "torch_sqrt_float32": results}))


if __name__ == "__main__":
    main()
