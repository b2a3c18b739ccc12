"""``ustc.matmul``: the one-shot form of :class:`ustc.Matmul`, through the plan cache.

``alpha * op(a) @ op(b) + beta * c`` for sparse and dense operands (see
:mod:`ustc.ops.plan`). A call whose operands match an earlier call's in
format, shape, dtypes, device, transposes and alpha/beta kind reuses that
plan and only executes. As in nvmath-python, a dense ``c`` is updated in
place and returned (``beta`` defaults to 1 when ``c`` is given); pass
``out=`` to leave ``c`` unchanged and receive the result there.
``prologs``, ``epilog`` and ``semiring`` are :meth:`ustc.Matmul.plan`'s; they
are part of the plan cache key.
"""

from __future__ import annotations

from . import plan_cache
from .plan import Matmul, bind
from .routes import fusion


def matmul(a, b, c=None, alpha=1, beta=None, *, transpose_a: bool = False, transpose_b: bool = False,
           options: dict | None = None, out=None, prologs=None, epilog=None, semiring=None):
    options = dict(options or {})
    fused = fusion(prologs, epilog, semiring)
    bound = bind(a, b, c, alpha, beta, transpose_a, transpose_b, options, semiring=fused.semiring)
    key = (bound.problem, fused) if fused.active else bound.problem
    mm = plan_cache.get(key)
    if mm is None:
        mm = Matmul(a, b, c, alpha, beta, transpose_a=transpose_a, transpose_b=transpose_b, options=options)
        mm._adopt((a, b, c, alpha, beta), bound)
        mm._fusion = fused
        mm.plan()
        if plan_cache.stats()["maxsize"]:
            plan_cache.put(key, mm)
    else:
        mm._adopt((a, b, c, alpha, beta), bound)
    try:
        return mm.execute(out=out)
    finally:
        mm._detach()
