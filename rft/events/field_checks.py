"""What one event field may hold, and how it is packed on the wire.

The type checks that event construction runs on each field (named `check_*`, each raising
InvalidEventError that names `Event.field`), the packed token-array dtypes, and the conversions of
fields whose model value is not their Avro value (JSON object text, packed little-endian arrays).
`rft.events.transcoder` picks among them by each field's schema type and annotation; nothing here
knows any event.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from rft.errors import EncodeError

ID_DTYPE = np.dtype("<i4")
FLOAT_DTYPE = np.dtype("<f4")
MASK_DTYPE = np.dtype(np.bool_)

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
_NATIVE_LE = sys.byteorder == "little"

Check = Callable[[str, str, Any], Any]
"""(event, field, value) -> the value as the event keeps it; raises InvalidEventError."""


class InvalidEventError(EncodeError, ValueError):
    """An event was built with a wrong-typed, out-of-range or inconsistent field."""


def fail(event: str, name: str, message: str) -> InvalidEventError:
    return InvalidEventError(f"{event}.{name}: {message}")


def check_str(event: str, name: str, value: object) -> str:
    if type(value) is str:
        return value
    if isinstance(value, str):
        return str(value)
    raise fail(event, name, f"expected str, got {type(value).__name__} {value!r:.80}")


def check_int(event: str, name: str, value: object, bounds: tuple[int, int] = INT64) -> int:
    # bool is an int subclass; a bool where a count belongs is a bug, not a number
    if type(value) is not int:
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise fail(event, name, f"expected int, got {type(value).__name__} {value!r:.80}")
        value = int(value)
    if not bounds[0] <= value <= bounds[1]:
        raise fail(event, name, f"{value} is outside [{bounds[0]}, {bounds[1]}]")
    return value


def check_int32(event: str, name: str, value: object) -> int:
    return check_int(event, name, value, INT32)


def out_of_int32(event: str, name: str, value: int) -> int:
    """Raise for a decoded Avro int outside int32 (fastavro reads ints as longs)."""
    raise fail(event, name, f"{value} does not fit int32")


def check_float(event: str, name: str, value: object) -> float:
    if type(value) is float:
        return value
    if isinstance(value, bool) or not isinstance(value, float | int | np.floating | np.integer):
        raise fail(event, name, f"expected float, got {type(value).__name__} {value!r:.80}")
    return float(value)


def check_bool(event: str, name: str, value: object) -> bool:
    if type(value) is bool:
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    raise fail(event, name, f"expected bool, got {type(value).__name__} {value!r:.80}")


def check_bytes(event: str, name: str, value: object) -> bytes:
    if type(value) is bytes:
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise fail(event, name, f"expected bytes, got {type(value).__name__}")


def check_mapping(event: str, name: str, value: object) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise fail(event, name, f"expected a dict, got {type(value).__name__}")
    return value if type(value) is dict else dict(value)


def check_str_map(event: str, name: str, value: object) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise fail(event, name, f"expected a mapping of str to str, got {type(value).__name__}")
    for key, item in value.items():
        if type(key) is not str or type(item) is not str:
            raise fail(event, name, f"entry {key!r:.40}: {item!r:.40} is not str -> str")
    return value if type(value) is dict else dict(value)


def check_float_map(event: str, name: str, value: object) -> dict[str, float]:
    if not isinstance(value, Mapping):
        raise fail(event, name, f"expected a mapping of str to float, got {type(value).__name__}")
    out: dict[str, float] | None = None
    for key, item in value.items():
        if type(key) is not str:
            raise fail(event, name, f"key {key!r:.40} is not str")
        if type(item) is not float:
            if isinstance(item, bool) or not isinstance(
                item, float | int | np.floating | np.integer
            ):
                raise fail(event, name, f"entry {key!r:.40}: {item!r:.40} is not a number")
            out = out if out is not None else dict(value)
            out[key] = float(item)
    if out is not None:
        return out
    return value if type(value) is dict else dict(value)


def check_bytes_map(event: str, name: str, value: object) -> dict[str, bytes]:
    if not isinstance(value, Mapping):
        raise fail(event, name, f"expected a mapping of str to bytes, got {type(value).__name__}")
    out: dict[str, bytes] = {}
    for key, item in value.items():
        if type(key) is not str:
            raise fail(event, name, f"key {key!r:.40} is not str")
        out[key] = check_bytes(event, f"{name}[{key!r}]", item)
    return out


def check_tuple_of(event: str, name: str, value: object, kind: type) -> tuple[Any, ...]:
    if not isinstance(value, Sequence) or isinstance(value, str | bytes):
        raise fail(event, name, f"expected a sequence of {kind.__name__}")
    for i, item in enumerate(value):
        if not isinstance(item, kind):
            raise fail(event, f"{name}[{i}]", f"expected {kind.__name__}, got {type(item)}")
    return tuple(value)


def check_instance(event: str, name: str, value: object, kind: type) -> Any:
    if not isinstance(value, kind):
        raise fail(event, name, f"expected {kind.__name__}, got {type(value)}")
    return value


def check_rows(
    event: str, name: str, value: object, columns: tuple[Check, ...]
) -> tuple[tuple[Any, ...], ...]:
    """A sequence of fixed-width rows (a record kept as a plain tuple), each value checked."""
    if not isinstance(value, Sequence) or isinstance(value, str | bytes):
        raise fail(event, name, f"expected a sequence of {len(columns)}-tuples")
    rows = []
    for i, row in enumerate(value):
        where = f"{name}[{i}]"
        if (
            not isinstance(row, Sequence)
            or isinstance(row, str | bytes)
            or len(row) != len(columns)
        ):
            raise fail(event, where, f"expected {len(columns)} values, got {row!r:.80}")
        rows.append(
            tuple(check(event, where, item) for check, item in zip(columns, row, strict=True))
        )
    return tuple(rows)


def json_text(event: str, name: str, value: object) -> str:
    if not isinstance(value, Mapping):
        raise fail(event, name, f"expected a JSON object (dict), got {type(value).__name__}")
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise fail(event, name, f"is not strict JSON: {exc}") from exc


def json_object(name: str, text: str) -> dict[str, Any]:
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError(f"{name} is JSON {type(value).__name__}, expected an object")
    return value


def _vector(event: str, name: str, value: object, dtype: np.dtype, what: str) -> np.ndarray:
    """`value` as a 1-d array (an empty one already of `dtype`)."""
    arr = np.asarray(value)
    if arr.ndim != 1:
        raise fail(event, name, f"expected a 1-d {what}, got shape {arr.shape}")
    return arr if arr.size else np.zeros(0, dtype=dtype)


def int_array(event: str, name: str, value: object) -> npt.NDArray[np.int32]:
    if type(value) is np.ndarray and value.dtype == ID_DTYPE and value.ndim == 1:
        return value
    arr = _vector(event, name, value, ID_DTYPE, "sequence of token ids")
    if arr.dtype.kind not in "iu":
        raise fail(event, name, f"expected integer token ids, got dtype {arr.dtype}")
    if arr.size:
        low, high = int(arr.min()), int(arr.max())
        if low < INT32[0] or high > INT32[1]:
            raise fail(event, name, f"token id range [{low}, {high}] does not fit int32")
    return arr.astype(ID_DTYPE)


def float_array(event: str, name: str, value: object) -> npt.NDArray[np.float32]:
    if type(value) is np.ndarray and value.dtype == FLOAT_DTYPE and value.ndim == 1:
        return value
    arr = _vector(event, name, value, FLOAT_DTYPE, "sequence of floats")
    if arr.dtype.kind not in "fiu":
        raise fail(event, name, f"expected floats, got dtype {arr.dtype}")
    return arr.astype(FLOAT_DTYPE)


def mask_array(event: str, name: str, value: object) -> npt.NDArray[np.bool_]:
    if type(value) is np.ndarray and value.dtype == MASK_DTYPE and value.ndim == 1:
        return value
    arr = _vector(event, name, value, MASK_DTYPE, "mask")
    if arr.dtype.kind == "b":
        return arr.astype(MASK_DTYPE)
    if arr.dtype.kind not in "iu" or int(arr.min()) < 0 or int(arr.max()) > 1:
        raise fail(event, name, "expected booleans or 0/1 integers")
    return arr.astype(MASK_DTYPE)


def packed(arr: np.ndarray, dtype: np.dtype) -> bytes:
    # arrays already hold little-endian dtypes; only a big-endian host's native arrays convert
    if _NATIVE_LE or arr.dtype == dtype:
        return arr.tobytes()
    return arr.astype(dtype).tobytes()


def unpack_mask(name: str, raw: bytes) -> npt.NDArray[np.bool_]:
    if raw.translate(None, b"\x00\x01"):
        raise ValueError(f"{name} holds bytes other than 0 and 1")
    return np.frombuffer(raw, dtype=MASK_DTYPE)


def check_finite_positive(event: str, name: str, value: float) -> None:
    # a logprob temperature divides the logits: 0, negative, inf or NaN has no meaning there
    if not (math.isfinite(value) and value > 0.0):
        raise fail(event, name, f"must be finite and > 0, got {value!r}")
