"""``ustc.matmul``: the one-shot form of :class:`ustc.Matmul`, through the plan cache.

``alpha * op(a) @ op(b) + beta * c`` for sparse and dense operands (see
:mod:`ustc.ops.plan`). A call whose operands match an earlier call's in
format, shape, dtypes, device, transposes and alpha/beta kind reuses that
plan and only executes. As in nvmath-python, a dense ``c`` is updated in
place and returned (``beta`` defaults to 1 when ``c`` is given); pass
``out=`` to leave ``c`` unchanged and receive the result there.
``prologs``, ``epilog`` and ``semiring`` are :meth:`ustc.Matmul.plan`'s; they
are part of the plan cache key. bfloat16 operands (torch, or ml_dtypes where
installed) run in float32 and give bfloat16 results (:mod:`ustc.ops.narrow`).
"""

from __future__ import annotations

from . import narrow, plan_cache
from .plan import Matmul, bind
from .routes import fusion


def matmul(a, b, c=None, alpha=1, beta=None, *, transpose_a: bool = False, transpose_b: bool = False,
           options: dict | None = None, out=None, prologs=None, epilog=None, semiring=None):
    wide = narrow.bfloat16_product(a, b, c, out)
    if wide is not None:  # bfloat16 has no NumPy dtype: float32 twins, the result rounded back (ops.narrow)
        a32, b32, c32, out32 = wide.operands
        return wide.finish(matmul(a32, b32, c32, alpha, beta, transpose_a=transpose_a, transpose_b=transpose_b,
                                  options=options, out=out32, prologs=prologs, epilog=epilog, semiring=semiring))
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
