"""Input checks shared by the algorithm functions.

Shapes and dtypes are checked at the entry of every registered function so that a bad batch fails
with a message naming the argument, instead of broadcasting silently into a wrong loss.
"""

from __future__ import annotations

import torch

from rft.errors import RftError


class AlgorithmInputError(RftError, ValueError):
    """A tensor handed to an algorithm function has the wrong shape, dtype or values."""


def require_shape(name: str, tensor: torch.Tensor, shape: torch.Size | tuple[int, ...]) -> None:
    """Raise AlgorithmInputError unless `tensor.shape == shape`."""
    if tuple(tensor.shape) != tuple(shape):
        raise AlgorithmInputError(
            f"{name}: expected shape {tuple(shape)}, got {tuple(tensor.shape)}"
        )


def require_ndim(name: str, tensor: torch.Tensor, ndim: int) -> None:
    """Raise AlgorithmInputError unless `tensor` has `ndim` dimensions."""
    if tensor.dim() != ndim:
        raise AlgorithmInputError(
            f"{name}: expected a {ndim}-D tensor, got shape {tuple(tensor.shape)}"
        )


def require_finite(name: str, tensor: torch.Tensor) -> None:
    """Raise AlgorithmInputError naming the first non-finite position of `tensor`."""
    bad = ~torch.isfinite(tensor)
    if bool(bad.any()):
        position = tuple(int(i) for i in bad.nonzero()[0].tolist())
        raise AlgorithmInputError(
            f"{name}: non-finite value {tensor[position].item()!r} at index {position}"
        )


def as_float_mask(
    name: str, mask: torch.Tensor, shape: torch.Size, dtype: torch.dtype
) -> torch.Tensor:
    """Check a 0/1 (bool or integer or float) mask against `shape`; return it as `dtype`."""
    if tuple(mask.shape) != tuple(shape):  # require_shape's check, one call shallower: hot path
        raise AlgorithmInputError(f"{name}: expected shape {tuple(shape)}, got {tuple(mask.shape)}")
    if mask.dtype != torch.bool:
        values = mask if mask.dtype.is_floating_point else mask.to(torch.float64)
        if bool(((values != 0) & (values != 1)).any()):
            raise AlgorithmInputError(f"{name}: mask values must be 0 or 1")
    return mask.to(dtype)
