"""ustc inside PyTorch: ``TorchUST`` tensors, ``reformat_model``, ``prune_model``.

Import it explicitly (``import ustc.torch``); without PyTorch installed the
import raises :class:`ustc.MissingDependencyError` naming the ``torch`` extra.
See ``docs/torch.md``.
"""

from ..errors import require

require("torch", "torch")

from . import ops  # noqa: E402,F401  (registers the intercepted ops)
from . import compiled  # noqa: E402,F401  (the ustc:: custom ops for torch.compile)
from . import fused  # noqa: E402,F401  (fused optimizer kernels on TorchUST parameters)
from . import masked  # noqa: E402,F401  (W[mask] = value)
from .optim_state import install as _install_optim_state  # noqa: E402
from .checkpoint import add_safe_globals, install as _install_checkpoints, register_load_hooks, safe_globals  # noqa: E402
from .autograd import sddmm  # noqa: E402
from .pruning import fold_torch_pruning, prune_model  # noqa: E402
from .propagate import PropagationReport, UntraceableModel, propagate  # noqa: E402
from .reformat import LayerSummary, ReformatSummary, default_reformat, reformat_model  # noqa: E402
from .subclass import TorchUST, dense_fallback, set_dense_fallback  # noqa: E402

_install_checkpoints()
_install_optim_state()

__all__ = ["TorchUST", "dense_fallback", "set_dense_fallback", "sddmm", "reformat_model", "prune_model",
           "default_reformat", "fold_torch_pruning", "LayerSummary", "ReformatSummary", "safe_globals",
           "add_safe_globals", "register_load_hooks", "propagate", "PropagationReport", "UntraceableModel"]
