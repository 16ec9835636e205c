"""Input checks shared by the algorithm functions.

Shapes and dtypes are checked at the entry of every registered function so that a bad batch fails
with a message naming the argument, instead of broadcasting silently into a wrong loss.

The `*_error` constructors build each message in one place; the hot path of a training step
tests its conditions inline and calls them only to fail, so a step pays for the checks, not for
a call per check (`require_*` are the same checks as calls, for code off that path).
"""

from __future__ import annotations

import torch

from rft.errors import RftError


class AlgorithmInputError(RftError, ValueError):
    """A tensor handed to an algorithm function has the wrong shape, dtype or values."""


def shape_error(
    name: str, expected: torch.Size | tuple[int, ...], got: torch.Size | tuple[int, ...]
) -> AlgorithmInputError:
    return AlgorithmInputError(f"{name}: expected shape {tuple(expected)}, got {tuple(got)}")


def ndim_error(name: str, tensor: torch.Tensor, ndim: int) -> AlgorithmInputError:
    return AlgorithmInputError(
        f"{name}: expected a {ndim}-D tensor, got shape {tuple(tensor.shape)}"
    )


def non_finite_error(name: str, tensor: torch.Tensor) -> AlgorithmInputError:
    """The error naming the first non-finite position of `tensor`."""
    position = tuple(int(i) for i in (~torch.isfinite(tensor)).nonzero()[0].tolist())
    return AlgorithmInputError(
        f"{name}: non-finite value {tensor[position].item()!r} at index {position}"
    )


def require_shape(name: str, tensor: torch.Tensor, shape: torch.Size | tuple[int, ...]) -> None:
    """Raise AlgorithmInputError unless `tensor.shape == shape`."""
    if tuple(tensor.shape) != tuple(shape):
        raise shape_error(name, shape, tensor.shape)


def require_ndim(name: str, tensor: torch.Tensor, ndim: int) -> None:
    """Raise AlgorithmInputError unless `tensor` has `ndim` dimensions."""
    if tensor.dim() != ndim:
        raise ndim_error(name, tensor, ndim)


def require_finite(name: str, tensor: torch.Tensor) -> None:
    """Raise AlgorithmInputError naming the first non-finite position of `tensor`."""
    if not bool(torch.isfinite(tensor).all()):
        raise non_finite_error(name, tensor)
