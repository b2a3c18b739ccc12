"""What each node of a traced model does to the features of its tensors, for sparsity propagation.

:func:`classify` sorts a node into one of four kinds:

* ``linear``: an ``nn.Linear`` module (plain forward; its weight dense or a TorchUST);
* ``unary``: element-wise in one feature tensor (activations, dropout, a
  number added or multiplied, ``x * s`` for a per-row or scalar tensor ``s``):
  feature ``j`` of the output depends on feature ``j`` of the input only;
* ``binary``: element-wise in two feature tensors of the same width (``+``,
  ``-``, ``*``: residual adds, gates);
* ``boundary``: everything else (LayerNorm and softmax mix features, reshapes
  move them, modules fx keeps whole are opaque): nothing propagates through,
  and its inputs are handed over at full width.

A feature tensor is a floating-point tensor of at least one dimension; its
features are its last dimension.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import fx, nn

from .linear import plain_forward

LINEAR, UNARY, BINARY, BOUNDARY = "linear", "unary", "binary", "boundary"

_UNARY_MODULES = (nn.ReLU, nn.ReLU6, nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid, nn.LeakyReLU, nn.ELU, nn.CELU,
                  nn.SELU, nn.Hardtanh, nn.Hardswish, nn.Hardsigmoid, nn.Mish, nn.Softplus, nn.Softsign,
                  nn.Tanhshrink, nn.Identity)
_DROPOUT_MODULES = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout)
_UNARY_FUNCTIONS = {torch.relu, F.relu, F.relu6, F.gelu, F.silu, F.elu, F.celu, F.selu, F.leaky_relu, F.hardtanh,
                    F.hardswish, F.hardsigmoid, F.mish, F.softplus, F.softsign, torch.tanh, F.tanh, torch.sigmoid,
                    F.sigmoid, torch.abs, torch.neg, operator.neg, torch.square, torch.exp}
_UNARY_METHODS = {"relu", "tanh", "sigmoid", "abs", "neg", "square", "exp", "contiguous", "clone",
                  "relu_", "tanh_", "sigmoid_", "abs_", "neg_", "square_", "exp_"}
_VIEW_METHODS = {"view", "view_as", "reshape", "reshape_as", "transpose", "permute", "t", "narrow", "select",
                 "unsqueeze", "squeeze", "flatten", "unflatten", "expand", "expand_as", "split", "chunk", "unbind",
                 "contiguous", "detach", "__getitem__"}
_VIEW_FUNCTIONS = {operator.getitem, torch.reshape, torch.transpose, torch.permute, torch.t, torch.narrow,
                   torch.select, torch.unsqueeze, torch.squeeze, torch.flatten, torch.split, torch.chunk,
                   torch.unbind, torch.detach}
_ADD = {operator.add, operator.sub, torch.add, torch.sub, "add", "sub"}
_MUL = {operator.mul, torch.mul, "mul"}
_DIV = {operator.truediv, torch.div, "div"}


@dataclass(frozen=True)
class Op:
    """A classified node. ``inputs``: its feature-tensor arguments (one, or two for ``binary``).
    ``exact``: the output's constant features follow from the input's by evaluating the op
    (False for random dropout and products with unknown factors: only zeros stay known).
    ``product``: a binary product (a 0 in either operand makes the output 0)."""

    kind: str
    inputs: tuple = ()
    exact: bool = True
    product: bool = False


def is_feature(arg, shapes: dict, dtypes: dict) -> bool:
    """Whether ``arg`` is a node whose output is a floating tensor of at least one dimension."""
    return isinstance(arg, fx.Node) and len(shapes.get(arg.name, ())) >= 1 and dtypes[arg.name].is_floating_point


def _target(node: fx.Node):
    return node.target if node.op in ("call_function", "call_method") else None


def _dropout_exact(node: fx.Node) -> bool:
    """F.dropout(x, p, training, inplace): identity unless training (the default is True)."""
    training = node.kwargs.get("training", node.args[2] if len(node.args) > 2 else True)
    p = node.kwargs.get("p", node.args[1] if len(node.args) > 1 else 0.5)
    return training is False or p == 0


def classify(node: fx.Node, modules: dict, shapes: dict, dtypes: dict) -> Op:
    """The :class:`Op` of ``node`` (see the module docstring); ``modules``: the graph's named modules."""
    if node.op not in ("call_module", "call_function", "call_method") or not is_feature(node, shapes, dtypes):
        return Op(BOUNDARY)
    features = [a for a in node.args if is_feature(a, shapes, dtypes)]
    rest = [a for a in node.args if a not in features] + list(node.kwargs.values())
    if any(isinstance(a, fx.Node) and is_feature(a, shapes, dtypes) for a in node.kwargs.values()):
        return Op(BOUNDARY)
    if node.op == "call_module":
        return _module(node, modules[node.target], features)
    target = _target(node)
    if len(features) == 1 and node.args and node.args[0] is features[0]:
        if target in _UNARY_FUNCTIONS or target in _UNARY_METHODS:
            return Op(UNARY, (features[0],), exact=not any(isinstance(a, fx.Node) for a in rest))
        if target in (F.dropout, "dropout"):
            return Op(UNARY, (features[0],), exact=_dropout_exact(node))
    if target in _ADD | _MUL | _DIV:
        return _arithmetic(node, target, features, rest, shapes)
    return Op(BOUNDARY)


def _module(node: fx.Node, module: nn.Module, features: list) -> Op:
    if len(node.args) != 1 or node.kwargs or len(features) != 1:
        return Op(BOUNDARY)
    if plain_forward(module):
        return Op(LINEAR, (features[0],))
    if isinstance(module, _UNARY_MODULES):
        return Op(UNARY, (features[0],))
    if isinstance(module, _DROPOUT_MODULES):
        return Op(UNARY, (features[0],), exact=not module.training or module.p == 0)
    return Op(BOUNDARY)


def _width(node: fx.Node, shapes: dict) -> int:
    return shapes[node.name][-1]


def _arithmetic(node: fx.Node, target, features: list, rest: list, shapes: dict) -> Op:
    """``+ - * /`` with one or two feature operands."""
    numbers = all(isinstance(a, (int, float, bool)) and not isinstance(a, complex) for a in rest)
    width = _width(node, shapes)
    if len(features) == 2 and all(_width(a, shapes) == width for a in features) and target not in _DIV:
        if len(node.args) == 2 and numbers:
            return Op(BINARY, tuple(features), product=target in _MUL)
        return Op(BOUNDARY)
    if len(features) != 1 or _width(features[0], shapes) != width:
        return Op(BOUNDARY)
    others = [a for a in node.args if a is not features[0]]
    if numbers and len(others) <= 1:
        if target in _DIV and node.args[0] is not features[0]:
            return Op(BOUNDARY)  # number / x: a 0 feature gives inf
        return Op(UNARY, (features[0],))
    # x * s with s per row or a scalar computed at run time: zeros stay zeros, other constants do not
    if target in _MUL and len(others) == 1 and _broadcasts_over_features(others[0], shapes) and \
            all(isinstance(a, (int, float, bool)) for a in node.kwargs.values()):
        return Op(UNARY, (features[0],), exact=False)
    return Op(BOUNDARY)


def _broadcasts_over_features(arg, shapes: dict) -> bool:
    """A number, a node giving a number, or a tensor of last dimension 1 (or 0-D)."""
    if not isinstance(arg, fx.Node):
        return isinstance(arg, (int, float, bool))
    shape = shapes.get(arg.name)
    return shape is None and arg.op != "placeholder" or shape is not None and (len(shape) == 0 or shape[-1] == 1)


_INPLACE_OPERATORS = {operator.iadd, operator.isub, operator.imul, operator.itruediv}


def is_inplace(node: fx.Node, modules: dict) -> bool:
    """Whether the node writes into its first argument and returns it (``inplace=True``, a method
    ending in ``_``, ``x += y``)."""
    if node.op == "call_function" and node.target in _INPLACE_OPERATORS:
        return True
    if node.op == "call_module":
        return bool(getattr(modules.get(node.target), "inplace", False))
    if node.op == "call_method" and str(node.target).endswith("_"):
        return True
    return bool(node.kwargs.get("inplace", False))


def _is_view(node: fx.Node) -> bool:
    """Whether the node may return a view of (memory shared with) its first argument."""
    return node.op == "call_method" and node.target in _VIEW_METHODS or \
        node.op == "call_function" and node.target in _VIEW_FUNCTIONS


def redirect_inplace(gm: fx.GraphModule, modules: dict) -> None:
    """After an in-place op ``y = x.relu_()`` the model's later reads of ``x`` read ``y`` (the same
    tensor, written): point them at ``y`` in the graph, so that what each node reads is what the
    analysis sees (in place on the traced copy; the model computes the same)."""
    order = {node: i for i, node in enumerate(gm.graph.nodes)}
    for node in list(gm.graph.nodes):
        if is_inplace(node, modules) and node.args and isinstance(node.args[0], fx.Node):
            position = order[node]
            node.args[0].replace_all_uses_with(node, delete_user_cb=lambda user: order[user] > position)
    gm.recompile()


def pinned(gm: fx.GraphModule, modules: dict) -> frozenset:
    """Names of the nodes an in-place op writes into while a view can see it: the input of an
    in-place op that is a view or has views taken of it, any tensor passed as ``out=``, and
    through views what it views. Such a
    tensor stays as the model has it (full width, nothing assumed about its features), so that
    the write reaches the views (after :func:`redirect_inplace`, plain later reads are no concern)."""
    found = set()
    for node in gm.graph.nodes:
        if isinstance(node.kwargs.get("out"), fx.Node):  # written through out=: pinned whatever else
            source = node.kwargs["out"]
        elif is_inplace(node, modules) and node.args and isinstance(node.args[0], fx.Node):
            source = node.args[0]
            if not _is_view(source) and not any(_is_view(user) for user in source.users if user is not node):
                continue
        else:
            continue
        stack = [source]
        while stack:
            current = stack.pop()
            found.add(current.name)
            if _is_view(current) and current.args and isinstance(current.args[0], fx.Node):
                stack.append(current.args[0])
    return frozenset(found)


def evaluate(node: fx.Node, modules: dict, values: dict):
    """Run ``node``'s op with its feature arguments replaced by ``values[arg]`` (1-D tensors)."""
    args = fx.node.map_arg(node.args, lambda a: values[a])
    kwargs = fx.node.map_arg(node.kwargs, lambda a: values[a])
    if node.op == "call_module":
        return modules[node.target](*args, **kwargs)
    if node.op == "call_method":
        return getattr(args[0], node.target)(*args[1:], **kwargs)
    return node.target(*args, **kwargs)
