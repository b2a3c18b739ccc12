"""Tensor storage: buffers per level, conversion, interop, printing."""

from .tensor import Tensor

__all__ = ["Tensor"]
