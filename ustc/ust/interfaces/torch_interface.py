"""``TorchUST``, ``reformat_model`` and ``prune_model`` under nvmath-python's module path;
they are :mod:`ustc.torch`'s (see ``docs/torch.md``)."""

from ...torch import TorchUST, prune_model, reformat_model  # noqa: F401

__all__ = ["TorchUST", "reformat_model", "prune_model"]
