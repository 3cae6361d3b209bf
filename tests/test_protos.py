"""The committed gRPC code is what protos/generate.py makes of the .proto files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_generated_grpc_code_is_current():
    result = subprocess.run(
        [sys.executable, str(ROOT / "protos" / "generate.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
