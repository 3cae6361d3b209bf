"""Loading pickled NumPy data (`.npy` files holding object arrays) without executing code.

`np.load(..., allow_pickle=True)` runs whatever a pickle names, so any file a caller can point a
service at becomes code the service runs. `load_npy` reads the same files with a restricted
unpickler that can only rebuild numpy arrays, dtypes and scalars and plain builtins (dict, list,
tuple, str, bytes, int, float, bool, None); a pickle naming anything else is refused with
`UnsafePickleError` before that thing is looked up.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import IO, Any

import numpy as np
from numpy.lib import format as npy_format

# numpy pickles name its internals under numpy.core (1.x) or numpy._core (2.x); both resolve to
# the same functions of the installed numpy, looked up here rather than by the pickle.
_NUMPY_INTERNALS = ("numpy.core.multiarray", "numpy._core.multiarray")
_ALLOWED: dict[tuple[str, str], Any] = {
    **{(module, "_reconstruct"): np._core.multiarray._reconstruct for module in _NUMPY_INTERNALS},
    **{(module, "scalar"): np._core.multiarray.scalar for module in _NUMPY_INTERNALS},
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    **{
        ("builtins", t.__name__): t
        for t in (dict, list, tuple, str, bytes, int, float, bool, complex)
    },
}


class UnsafePickleError(pickle.UnpicklingError, ValueError):
    """A pickle names something other than numpy arrays/dtypes and plain builtins."""


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, file: IO[bytes], source: str) -> None:
        super().__init__(file)
        self.source = source

    def find_class(self, module: str, name: str) -> Any:
        allowed = _ALLOWED.get((module, name))
        if allowed is None:
            raise UnsafePickleError(
                f"{self.source}: refusing to unpickle {module}.{name}; only numpy arrays, dtypes "
                "and plain builtins (dict, list, tuple, str, int, float, bool, None) are allowed"
            )
        return allowed

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePickleError(f"{self.source}: refusing a pickle with persistent ids")


def safe_unpickle(file: IO[bytes], source: str = "pickle") -> Any:
    """Unpickle `file` allowing only numpy arrays/dtypes/scalars and plain builtins."""
    return _RestrictedUnpickler(file, source).load()


def load_npy(path: str | Path) -> np.ndarray:
    """The array in the `.npy` file at `path`; object arrays are unpickled with the restricted
    unpickler (see the module doc), other arrays read as `np.load` would without pickles."""
    path = Path(path)
    with path.open("rb") as file:
        version = npy_format.read_magic(file)
        if version == (1, 0):
            _, _, dtype = npy_format.read_array_header_1_0(file)
        elif version == (2, 0):
            _, _, dtype = npy_format.read_array_header_2_0(file)
        else:
            raise ValueError(f"{path}: unsupported .npy format version {version}")
        if not dtype.hasobject:
            file.seek(0)
            return npy_format.read_array(file, allow_pickle=False)
        array = safe_unpickle(file, source=str(path))
    if not isinstance(array, np.ndarray):
        raise UnsafePickleError(f"{path}: holds a {type(array).__name__}, not a numpy array")
    return array
