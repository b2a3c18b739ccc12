"""Hand-written kernels plugged into :class:`ustc.Matmul`'s dispatch (see ``registry``)."""

from .registry import OPS, Registered, lookup, register, registered, unregister

__all__ = ["OPS", "Registered", "lookup", "register", "registered", "unregister"]
