"""Floating-point casts on raw little-endian bytes, chunk by chunk, matching torch bit for bit.

numpy has no bfloat16, so BF16 is handled on the bit patterns with the round-to-nearest-even rule
torch's ``Tensor.to(torch.bfloat16)`` uses; FP16 goes through numpy's IEEE conversion, which rounds
the same way. Every finite value and infinity comes out exactly as torch makes it (tested on random
bit patterns and rounding ties). NaNs stay NaN but their payload bits are canonicalised: torch
itself gives different payloads on its scalar and vectorised paths, so there is nothing stable to
match. Going through torch instead would add its ~200 MB import to the splitter's resident set.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from neuronc.checkpoint._safetensors import FLOAT_DTYPES
from neuronc.errors import InvalidInputError

if TYPE_CHECKING:
    import numpy as np

# User-facing names for --dtype -> safetensors dtype codes.
DTYPE_NAMES = {
    "fp32": "F32",
    "float32": "F32",
    "fp16": "F16",
    "float16": "F16",
    "bf16": "BF16",
    "bfloat16": "BF16",
}


def dtype_code(name: str | None) -> str | None:
    """Return the safetensors code for a --dtype value (None stays None)."""
    if name is None:
        return None
    code = DTYPE_NAMES.get(name.lower())
    if code is None:
        msg = f"unknown dtype {name!r}"
        raise InvalidInputError(msg, hint="use one of fp32, fp16, bf16")
    return code


def cast_target(source: str, requested: str | None) -> str:
    """Return the dtype a tensor is stored with: floats take the requested dtype, others keep theirs."""
    if requested is None or source not in FLOAT_DTYPES:
        return source
    return requested


def cast_bytes(data: Any, source: str, target: str) -> Any:
    """Convert a buffer of ``source`` elements to ``target`` (F32, F16 or BF16); returns a buffer."""
    if source == target:
        return data
    import numpy as np

    # torch converts F64 to the half types through F32 as well (c10::Half and c10::BFloat16 are
    # constructed from float), so going through F32 reproduces its double rounding exactly.
    f32 = _to_f32(np.frombuffer(data, dtype=_NP[source]), source)
    if target == "F32":
        return f32
    if target == "F16":
        return _f32_to_f16(f32)
    if target == "BF16":
        return _f32_to_bf16(f32)
    msg = f"cannot cast {source} to {target}"
    raise ValueError(msg)


_NP = {"F16": "<f2", "BF16": "<u2", "F32": "<f4", "F64": "<f8"}


def _to_f32(values: np.ndarray[Any, Any], source: str) -> np.ndarray[Any, Any]:
    import numpy as np

    if source == "BF16":
        return (values.astype(np.uint32) << 16).view("<f4")
    if source == "F32":
        return values
    return values.astype("<f4")


def _f32_to_bf16(f32: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    import numpy as np

    bits = f32.view(np.uint32)
    rounded = ((bits + (((bits >> 16) & 1) + 0x7FFF)) >> 16).astype("<u2")
    nan = np.isnan(f32)
    if nan.any():
        rounded[nan] = 0x7FC0
    return rounded


def _f32_to_f16(values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    import numpy as np

    with np.errstate(over="ignore"):
        half = values.astype("<f2")
    nan = np.isnan(values)
    if nan.any():
        bits = half.view(np.uint16)
        bits[nan] = 0x7E00 | (np.signbit(values[nan]).astype(np.uint16) << 15)
    return half
