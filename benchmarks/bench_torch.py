"""PyTorch layer on the CPU: every target of issue 18 measured, with a PASS / FAIL verdict per target.

    python benchmarks/bench_torch.py [--quick] [--repeat N] [--only finetune,inference,...] [--write]

Sections (all by default; ``--only`` picks some):

* ``finetune``: one fine-tuning step (forward, backward, AdamW) of a GPT-style
  MLP stack (4 residual blocks, d_model 512, MLP 2048, LayerNorm, GELU; 8 x 64
  tokens) pruned by magnitude to 70% and 90% zeros, with weights as TorchUSTs
  (``reformat_model``'s default) against the dense masked model (the same
  model kept dense, gradients masked to the pattern and the mask re-applied
  after the step), on 1 and 2 threads. Targets: <= 1.0x at 90%, <= 1.5x at 70%;
* ``inference``: ``nn.Linear(2048, 2048)`` at batch 1, 16 and 128 under
  ``torch.inference_mode``, pruned 70% and 90% (CSR with uint16 columns, the
  default) and 2:4 (the default format, ``Structured(2, 4)`` with uint8
  in-block coordinates; ``2:4 as CSR`` rows show the other candidate),
  against the pruned dense layer. Targets: batch 1: 90% <= 0.5x, 70% <= 0.8x;
  batch 128: 90% <= 0.6x; 2:4 (default format) <= 1.0x at every batch. The
  MLP and transformer-style block of ``examples/torch_reformat.py`` are context.
  Each model is timed as it runs inside a large model: every call runs the next
  of ``K`` distinct copies (``copy.deepcopy``: own buffers), dense and TorchUST
  alike, ``K`` the same for both and chosen so that the TorchUST copies alone
  (the smaller side) hold at least 1.5x the last-level cache (read from /sys),
  so each call reads its weights from memory as a layer of a model whose
  weights exceed the cache does. The ``one copy`` columns (context, no verdict)
  call one copy back to back: its weights stay in the cache between calls.
  The other sections time one copy (their ratios compare two calls on the same
  weights; in ``overhead`` a product reading its weights from memory would hide
  more of the call's fixed cost, so one copy is the stricter test), and the
  ``finetune`` stack's weights and AdamW state fit this machine's 300 MiB cache
  on both sides;
* ``overhead``: a sparse ``nn.Linear`` call at batch 1 (the ``SparseLinear``
  that ``reformat_model`` leaves) against the planned product it runs
  (``Matmul.execute``); target <= 1.2x. Also timed: the same weight in a plain
  ``nn.Linear`` (through ``F.linear``'s tensor-subclass dispatch) and an
  ``nn.Linear`` whose weight's ``__torch_function__`` returns at once (torch's
  share of that route);
* ``compile``: ``torch.compile(fullgraph=True)`` against eager at batch 1;
  targets: compiled <= 1.0x eager, one graph and no graph break
  (``torch._dynamo.explain``). The dense model compiled the same way is timed
  too: its compiled / eager ratio is torch's own per-call cost at batch 1.
  Context: torch's floor, the compiled call with its ``ustc::linear`` kernels
  returning a zero result at once (guards, AOTAutograd's subclass unwrapping,
  Inductor's ``call``, the op's dispatch), and (eager + floor) / eager, the
  best compiled / eager a compiled call could reach;
* ``checkpoint``: bytes of ``torch.save(state_dict)`` of three 2:4 layers;
  target: within 1% of the storage (values, index buffers, biases);
* ``weights``: functional targets, each PASS / FAIL: ``torch.load`` with
  ``weights_only=True``, state_dict loading dense -> sparse and sparse -> dense,
  weight tying kept, ``reformat_model`` idempotent, plain ``pickle`` of a
  reformatted model, ``norm`` / ``abs`` / ``sum`` / ``mean`` / ``+ dense`` /
  indexing with autograd against the dense model.

Times are medians over ``--repeat`` rounds in which the competitors take turns
(a shared machine's drift spreads over all of them), each sample the mean of
back-to-back calls after an untimed one (plans and kernels ready: the steady
state). ``--quick`` runs 3 rounds. The verdict table closes the output; only
``--write`` touches a file (the ``PyTorch layer`` section of docs/benchmarks.md).
Idle OpenMP workers sleep (``OMP_WAIT_POLICY=PASSIVE``, set here before torch
starts its OpenMP runtime, as ``import ustc`` does for a process that imports
it first).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as `import ustc` sets it; torch's OpenMP starts at import

import argparse
import copy
import io
import itertools
import pickle
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numba
import torch
import torch.nn.functional as F
from torch import nn

from _common import machine, write_section

import ustc.torch
from ustc.formats import CSR
from ustc.torch import TorchUST
from ustc.torch.reformat import with_widths

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from torch_reformat import Block, mlp, prune_block  # noqa: E402

VERDICTS: list = []  # (section, target, measured, limit text, passed)


def verdict(section: str, target: str, value: float, limit: float, fmt: str = "{:.2f}x") -> str:
    """Record ``value <= limit`` as a verdict; returns PASS / FAIL."""
    passed = value <= limit
    VERDICTS.append((section, target, fmt.format(value), "<= " + fmt.format(limit), passed))
    return "PASS" if passed else "FAIL"


def check(section: str, target: str, passed: bool, measured: str = "") -> str:
    VERDICTS.append((section, target, measured or ("works" if passed else "broken"), "works", passed))
    return "PASS" if passed else "FAIL"


def alternating_us(fns: dict, rounds: int, inner) -> dict:
    """Median over ``rounds`` of the mean µs of ``inner`` back-to-back calls (an int, or a dict giving each
    function its own count), the functions taking turns in every round; one untimed call before each sample."""
    samples = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            count = inner[name] if isinstance(inner, dict) else inner
            fn()
            start = time.perf_counter()
            for _ in range(count):
                fn()
            samples[name].append((time.perf_counter() - start) / count * 1e6)
    return {name: statistics.median(values) for name, values in samples.items()}


def last_level_cache_bytes() -> int:
    """The largest CPU cache's size in bytes (Linux /sys; 32 MiB when it cannot be read)."""
    sizes = []
    for path in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = path.read_text().strip().upper()
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        try:
            sizes.append(int(text.rstrip("KMG")) * scale)
        except ValueError:
            continue
    return max(sizes, default=32 << 20)


CACHE_FACTOR, MAX_COPIES = 1.5, 256  # copies' bytes (smaller side) >= 1.5x the cache; at most 256 copies


def copies_for(sparse_bytes: int, dense_bytes: int) -> int:
    """How many distinct copies of a model each side cycles through (see the module docstring)."""
    need = CACHE_FACTOR * last_level_cache_bytes() / max(1, min(sparse_bytes, dense_bytes))
    return max(1, min(MAX_COPIES, int(need) + 1))


def rotating(models: list, x):
    """A call running the next of ``models`` on ``x`` each time (round robin)."""
    turn = itertools.cycle(models)
    return lambda: next(turn)(x)


def set_threads(n: int) -> None:
    torch.set_num_threads(n)
    numba.set_num_threads(n)


def layer(n: int, method: str, amount: float = 0.5) -> nn.Module:
    model = nn.Sequential(nn.Linear(n, n)).eval()
    ustc.torch.prune_model(model, amount, method=method)
    return model


# -- fine-tuning ------------------------------------------------------------------------------
class MLPBlock(nn.Module):
    """A GPT-style MLP block: x + down(gelu(up(norm(x))))."""

    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.norm, self.up, self.down = nn.LayerNorm(d), nn.Linear(d, hidden), nn.Linear(hidden, d)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


def finetune(rounds: int) -> str:
    """A fine-tuning step (forward, backward, AdamW) of the pruned stack, TorchUST against dense masked."""
    lines = ["| zeros | threads | dense masked ms | TorchUST ms | ratio | target | verdict |",
             "|---:|---:|---:|---:|---:|---:|---|"]
    d, hidden, blocks, tokens = 512, 2048, 4, (8, 64)
    for amount, limit in ((0.9, 1.0), (0.7, 1.5)):
        torch.manual_seed(0)
        dense = nn.Sequential(*(MLPBlock(d, hidden) for _ in range(blocks)))
        ustc.torch.prune_model(dense, amount, method="magnitude")
        masks = [(m.weight, m.weight.detach() != 0) for m in dense.modules() if isinstance(m, nn.Linear)]
        sparse = copy.deepcopy(dense)
        ustc.torch.reformat_model(sparse)
        x, target = torch.randn(*tokens, d), torch.randn(*tokens, d)
        opt_dense = torch.optim.AdamW(dense.parameters(), lr=1e-4)
        opt_sparse = torch.optim.AdamW(sparse.parameters(), lr=1e-4)

        def step_dense():
            opt_dense.zero_grad(set_to_none=True)
            F.mse_loss(dense(x), target).backward()
            for weight, mask in masks:
                weight.grad.mul_(mask)
            opt_dense.step()
            with torch.no_grad():
                for weight, mask in masks:
                    weight.mul_(mask)

        def step_sparse():
            opt_sparse.zero_grad(set_to_none=True)
            F.mse_loss(sparse(x), target).backward()
            opt_sparse.step()

        for threads in (1, 2):
            set_threads(threads)
            us = alternating_us({"dense": step_dense, "sparse": step_sparse}, rounds, 1)
            ratio = us["sparse"] / us["dense"]
            mark = verdict("finetune", f"step at {amount:.0%} zeros, {threads} thread(s)", ratio, limit)
            lines.append(f"| {amount:.0%} | {threads} | {us['dense'] / 1e3:.1f} | {us['sparse'] / 1e3:.1f} | "
                         f"{ratio:.2f} | {limit:.1f} | {mark} |")
        set_threads(2)
    return "\n".join(lines)


# -- inference --------------------------------------------------------------------------------
def weight_bytes(model: nn.Module) -> int:
    total = 0
    for module in model.modules():
        if isinstance(module, nn.Linear):
            w = module.weight
            total += w.storage_bytes if isinstance(w, TorchUST) else w.numel() * w.element_size()
    return total


class Copies:
    """A pruned model and its TorchUST twin, each as ``count`` distinct copies (see the module docstring)."""

    def __init__(self, model: nn.Module, func=None):
        self.dense = [copy.deepcopy(model)]
        summary = ustc.torch.reformat_model(model, func)
        self.formats = ", ".join(sorted({s.format for s in summary.layers}))
        self.sparse = [model]
        self.dense_bytes, self.sparse_bytes = weight_bytes(self.dense[0]), weight_bytes(model)
        self.count = copies_for(self.sparse_bytes, self.dense_bytes)
        for _ in range(self.count - 1):
            self.dense.append(copy.deepcopy(self.dense[0]))
            self.sparse.append(copy.deepcopy(model))
        if self.count > 1:  # distinct weights, not views of one storage
            assert _storage(self.dense[0]).isdisjoint(_storage(self.dense[1]))
            assert _storage(self.sparse[0]).isdisjoint(_storage(self.sparse[1]))


def _storage(model: nn.Module) -> set:
    """The data pointers of a model's Linear weights (a TorchUST's stored values)."""
    return {(m.weight.stored_values() if isinstance(m.weight, TorchUST) else m.weight).data_ptr()
            for m in model.modules() if isinstance(m, nn.Linear)}


def measure(pair: Copies, x: torch.Tensor, rounds: int) -> tuple:
    """(dense ms, TorchUST ms) cycling through the copies, the same for one copy, the max. rel. difference."""
    dense, model = pair.dense[0], pair.sparse[0]
    with torch.inference_mode():
        want, got = dense(x), model(x)
        error = float((got - want).abs().max() / want.abs().max())
        for m in pair.dense + pair.sparse:  # plans for this input made before timing
            m(x)
        inner = max(1, min(50, int(4e4 // max(1, x.numel()))))
        fns = {"dense": rotating(pair.dense, x), "ust": rotating(pair.sparse, x),
               "dense one": lambda: dense(x), "ust one": lambda: model(x)}
        counts = {"dense": pair.count, "ust": pair.count, "dense one": inner, "ust one": inner}
        us = alternating_us(fns, rounds, counts)
    return {name: value / 1e3 for name, value in us.items()}, error


def _csr16(weight):
    return TorchUST(ustc.Tensor.from_dense(weight, with_widths(CSR, crd_width=16)))


INFERENCE_TARGETS = {("90%", 1): 0.5, ("70%", 1): 0.8, ("90%", 128): 0.6,
                     ("2:4", 1): 1.0, ("2:4", 16): 1.0, ("2:4", 128): 1.0}


def inference(rounds: int) -> str:
    cache = last_level_cache_bytes()
    lines = [f"Each call runs the next of K distinct copies of the model, dense and TorchUST alike, K chosen so "
             f"that the TorchUST copies alone hold >= {CACHE_FACTOR}x the {cache / 2**20:.0f} MiB last-level "
             f"cache (at most {MAX_COPIES}): every call reads its weights from memory, as a layer of a model whose "
             "weights exceed the cache does. 'one copy' columns (context): one copy called back to back, its "
             "weights resident in the cache.", "",
             "| model | formats | input | weight bytes dense | TorchUST | copies K | dense ms | TorchUST ms | "
             "time ratio | one copy: dense ms | TorchUST ms | ratio | max rel. diff | target | verdict |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    cases = []
    for label, method, amount, func in (("90%", "magnitude", 0.9, None), ("70%", "magnitude", 0.7, None),
                                        ("2:4", "2:4", 0.5, None), ("2:4 as CSR", "2:4", 0.5, _csr16)):
        cases.append((f"Linear 2048x2048, {label}", label, lambda m=method, a=amount: layer(2048, m, a), func,
                      [(batch, 2048) for batch in (1, 16, 128)]))
    cases.append(("MLP 256-1024-1024-256, 2:4", None, lambda: _pruned_mlp(), None, [(32, 256)]))
    cases.append(("block: 2:4 attention, 80% MLP", None, lambda: _pruned_block(), None, [(2, 32, 256)]))
    for name, label, make, func, shapes in cases:
        torch.manual_seed(0)
        pair = Copies(make(), func)
        for shape in shapes:
            x = torch.randn(*shape)
            ms, err = measure(pair, x, rounds)
            limit = INFERENCE_TARGETS.get((label, shape[0])) if label else None
            ratio, one = ms["ust"] / ms["dense"], ms["ust one"] / ms["dense one"]
            mark = "" if limit is None else verdict("inference", f"{name}, batch {shape[0]}", ratio, limit)
            lines.append(f"| {name} | {pair.formats} | {'x'.join(map(str, shape))} | {pair.dense_bytes:,} | "
                         f"{pair.sparse_bytes:,} | {pair.count} | {ms['dense']:.3f} | {ms['ust']:.3f} | {ratio:.2f} | "
                         f"{ms['dense one']:.3f} | {ms['ust one']:.3f} | {one:.2f} | {err:.1e} | "
                         f"{'' if limit is None else f'{limit:.1f}'} | {mark} |")
        del pair
    return "\n".join(lines)


def _pruned_mlp():
    model = mlp(256).eval()
    ustc.torch.prune_model(model, method="2:4")
    return model


def _pruned_block():
    block = Block(256).eval()
    prune_block(block)
    return block


# -- overhead, compile, checkpoint ------------------------------------------------------------
class _Empty(torch.Tensor):
    """A weight whose ``__torch_function__`` returns at once: what torch's dispatch of a tensor subclass
    costs an ``nn.Linear`` call by itself (the floor of any route through ``F.linear``)."""

    result = None

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return cls.result

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise RuntimeError(f"{func} reached _Empty's dispatch")


def _dispatch_floor(n: int) -> nn.Module:
    plain = nn.Linear(n, n).eval()
    plain._parameters["weight"] = torch.Tensor._make_wrapper_subclass(_Empty, (n, n), dtype=torch.float32)
    _Empty.result = torch.zeros(1, n)
    return plain


def overhead(rounds: int) -> str:
    """A sparse nn.Linear call at batch 1 under inference_mode against the planned product it runs."""
    from ustc.torch import inference as path
    from ustc.torch.matmul import operand

    lines = ["| layer (batch 1) | planned product µs | nn.Linear µs | ratio | through F.linear µs | "
             "empty `__torch_function__` µs | general route µs | target | verdict |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    torch.manual_seed(0)
    for label, method, amount in (("2048x2048, 2:4", "2:4", 0.5), ("2048x2048, 70% CSR", "magnitude", 0.7),
                                  ("2048x2048, 90% CSR", "magnitude", 0.9), ("512x512, 90% CSR", "magnitude", 0.9)):
        n = int(label.split("x")[0])
        model = layer(n, method, amount)
        ustc.torch.reformat_model(model)  # the layer becomes a SparseLinear
        lin, x = model[0], torch.randn(1, n)
        planned = ustc.Matmul(operand(lin.weight), x.numpy().reshape(-1).copy()).plan()
        plain, floor = nn.Linear(n, n).eval(), _dispatch_floor(n)  # plain: the nn.Linear class, F.linear's dispatch
        plain.weight, plain.bias = lin.weight, lin.bias

        def general(lin=lin, x=x):
            path.ENABLED["on"] = False
            try:
                return lin(x)
            finally:
                path.ENABLED["on"] = True

        inner = 200 if n < 2048 else 20
        with torch.inference_mode():
            us = alternating_us({"planned": planned.execute, "layer": lambda lin=lin, x=x: lin(x),
                                 "plain": lambda m=plain, x=x: m(x), "floor": lambda m=floor, x=x: m(x),
                                 "general": general}, rounds, inner)
        ratio = us["layer"] / us["planned"]
        mark = verdict("overhead", f"nn.Linear call / planned product, {label}", ratio, 1.2)
        lines.append(f"| {label} | {us['planned']:.1f} | {us['layer']:.1f} | {ratio:.2f} | {us['plain']:.1f} | "
                     f"{us['floor']:.1f} | {us['general']:.1f} | 1.2 | {mark} |")
    return "\n".join(lines)


def compiled(rounds: int) -> str:
    """torch.compile(fullgraph=True) against eager at batch 1, under inference_mode."""
    lines = ["| model (batch 1) | graphs / breaks | dense eager ms | dense compiled / eager | TorchUST eager ms | "
             "TorchUST compiled ms | compiled / eager | torch's floor ms | (eager + floor) / eager | "
             "first compiled call s | verdict |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    torch.manual_seed(0)
    models = [("Linear 2048x2048, 2:4", layer(2048, "2:4"), torch.randn(1, 2048)),
              ("Linear 2048x2048, 90% CSR", layer(2048, "magnitude", 0.9), torch.randn(1, 2048)),
              ("MLP 256-1024-1024-256, 2:4", _pruned_mlp(), torch.randn(1, 256))]
    for name, model, x in models:
        dense = copy.deepcopy(model)
        ustc.torch.reformat_model(model)
        torch._dynamo.reset()
        with torch.inference_mode():
            explained = torch._dynamo.explain(model)(x)
            graphs, breaks = explained.graph_count, explained.graph_break_count
            torch._dynamo.reset()
            start = time.perf_counter()
            fast = torch.compile(model, fullgraph=True)
            fast(x)
            first = time.perf_counter() - start
            torch.testing.assert_close(fast(x), model(x), rtol=1e-4, atol=1e-5)
            dense_fast = torch.compile(dense, fullgraph=True)  # torch's own per-call cost of compiling at batch 1
            dense_fast(x)
            us = alternating_us({"dense": lambda m=dense: m(x), "dense compiled": lambda m=dense_fast: m(x),
                                 "eager": lambda m=model: m(x), "compiled": lambda m=fast: m(x),
                                 "floor": lambda m=fast: _without_products(m, x)},
                                rounds, 20 if "Linear" in name else 100)
        ratio = us["compiled"] / us["eager"]
        one_graph = check("compile", f"fullgraph=True, one graph, no break: {name}", graphs == 1 and breaks == 0,
                          f"{graphs} graph(s), {breaks} break(s)")
        mark = verdict("compile", f"compiled / eager, {name}", ratio, 1.0)
        lines.append(f"| {name} | {graphs} / {breaks} | {us['dense'] / 1e3:.3f} | "
                     f"{us['dense compiled'] / us['dense']:.2f} | {us['eager'] / 1e3:.3f} | "
                     f"{us['compiled'] / 1e3:.3f} | {ratio:.2f} | {us['floor'] / 1e3:.3f} | "
                     f"{(us['eager'] + us['floor']) / us['eager']:.2f} | {first:.1f} | {mark}, graph {one_graph} |")
    return "\n".join(lines)


def _without_products(compiled_model, x):
    """A call of the compiled model whose ``ustc::linear`` kernels return a zero result at once (the
    result allocated, no product): what torch's compiled call costs around the products (guards,
    AOTAutograd's subclass unwrapping, Inductor's ``call``, the custom op's dispatch). A compiled
    call can at best cost the eager products plus this floor, hence the column (eager + floor) / eager."""
    from ustc.torch import inference as path

    real = path.planned_linear
    path.planned_linear = lambda x, weight, bias, **_: x.new_zeros(*x.shape[:-1], weight.shape[0])
    try:
        return compiled_model(x)
    finally:
        path.planned_linear = real


def checkpoint() -> str:
    """Bytes of torch.save(model.state_dict()) for three 2048x2048 Linear layers pruned 2:4."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 2048))
    ustc.torch.prune_model(model, method="2:4")

    def saved(m) -> int:
        buf = io.BytesIO()
        torch.save(m.state_dict(), buf)
        return len(buf.getvalue())

    dense_bytes = saved(model)
    ustc.torch.reformat_model(model)
    storage = sum(m.weight.storage_bytes + m.bias.numel() * 4 for m in model if isinstance(m, nn.Linear))
    sparse_bytes = saved(model)
    mark = verdict("checkpoint", "torch.save bytes / storage bytes, 3 x 2:4 Linear", sparse_bytes / storage, 1.01)
    return ("| 3 x Linear 2048x2048, 2:4 | bytes |\n|---|---:|\n"
            f"| weights and biases as stored (Structured(2, 4), uint8 in-block coordinates) | {storage:,} |\n"
            f"| torch.save(state_dict), TorchUST ({mark}: within 1% of the storage) | {sparse_bytes:,} |\n"
            f"| torch.save(state_dict), the dense pruned model | {dense_bytes:,} |")


# -- functional targets -----------------------------------------------------------------------
def weights() -> str:
    """Checkpoints, state_dict across dense and sparse, tying, idempotent reformat, weight ops with autograd."""
    lines = ["| target | verdict |", "|---|---|"]
    for name, fn in WEIGHT_CHECKS:
        try:
            passed, measured = fn(), ""
        except Exception as exc:  # a failing target is reported, not raised
            passed, measured = False, f"{type(exc).__name__}: {exc}"[:80]
        lines.append(f"| {name} | {check('weights', name, bool(passed), measured)} {measured} |")
    return "\n".join(lines)


def _small(seed=0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
    ustc.torch.prune_model(model, 0.7)
    return model


def _load_weights_only():
    model = _small()
    ustc.torch.reformat_model(model)
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=True)
    return all(torch.equal(state[k].to_dense() if isinstance(state[k], TorchUST) else state[k],
                           v.to_dense() if isinstance(v, TorchUST) else v) for k, v in model.state_dict().items())


def _dense_to_sparse_and_back():
    dense, sparse = _small(), _small(1)
    ustc.torch.reformat_model(sparse)
    sparse.load_state_dict(dense.state_dict())
    into_dense = _small(2)
    into_dense.load_state_dict(sparse.state_dict())
    return isinstance(sparse[0].weight, TorchUST) and torch.equal(sparse[0].weight.to_dense(), dense[0].weight) \
        and not isinstance(into_dense[0].weight, TorchUST) and torch.equal(into_dense[0].weight, dense[0].weight)


def _tying():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 16))
    model[1].weight = model[0].weight
    ustc.torch.prune_model(model, 0.7)
    ustc.torch.reformat_model(model)
    return isinstance(model[0].weight, TorchUST) and model[1].weight is model[0].weight


def _idempotent():
    model = _small()
    ustc.torch.reformat_model(model)
    before = [m.weight for m in model if isinstance(m, nn.Linear)]
    ustc.torch.reformat_model(model)
    return [m.weight for m in model if isinstance(m, nn.Linear)] == before


def _weight_ops():
    model = _small()
    dense_w = model[0].weight.detach().clone().double().requires_grad_()
    W = TorchUST.from_torch(dense_w.detach(), "CSR").freeze_zeros_().requires_grad_()
    mask = dense_w.detach() != 0
    other = torch.randn(32, 16, dtype=torch.float64)
    losses = [lambda w: w.norm(), lambda w: w.abs().mean(), lambda w: w.sum(), lambda w: w.mean(),
              lambda w: (w + other).square().sum(), lambda w: w[3].sum() + w[:, 2].square().sum()]
    for loss in losses:
        W.grad, dense_w.grad = None, None
        got, want = loss(W), loss(dense_w)
        got.backward()
        want.backward()
        if not (torch.allclose(got, want) and torch.allclose(W.grad.to_dense(), dense_w.grad * mask)):
            return False
    return True


def _plain_pickle():
    model = _small()
    ustc.torch.reformat_model(model)
    loaded = pickle.loads(pickle.dumps(model))
    x = torch.randn(3, 16)
    return all(isinstance(loaded[i].weight, TorchUST) and loaded[i].weight.tensor_format == model[i].weight.tensor_format
               for i in (0, 2)) and torch.equal(loaded(x), model(x))


WEIGHT_CHECKS = [("torch.load(weights_only=True) of a sparse state_dict", _load_weights_only),
                 ("load_state_dict dense -> sparse model and sparse -> dense model", _dense_to_sparse_and_back),
                 ("weight tying kept by reformat_model", _tying),
                 ("reformat_model twice changes nothing", _idempotent),
                 ("pickle.dumps / loads of a reformatted model (formats kept, outputs equal)", _plain_pickle),
                 ("norm, abs().mean(), sum, mean, + dense, indexing with autograd (masked dense oracle)", _weight_ops)]


# -- main -------------------------------------------------------------------------------------
def summary() -> str:
    lines = ["| section | target | measured | limit | verdict |", "|---|---|---:|---:|---|"]
    for section, target, measured, limit, passed in VERDICTS:
        lines.append(f"| {section} | {target} | {measured} | {limit} | {'PASS' if passed else 'FAIL'} |")
    passed = sum(v[-1] for v in VERDICTS)
    lines.append(f"\n{passed} PASS, {len(VERDICTS) - passed} FAIL")
    return "\n".join(lines)


def _load() -> str:
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "?"


def _commit() -> str:
    try:
        root = Path(__file__).resolve().parent.parent
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "ustc", "benchmarks/bench_torch.py"],
                               cwd=root, capture_output=True, text=True).stdout.strip()
        return head.stdout.strip() + (" + uncommitted" if dirty else "")
    except OSError:
        return "?"


SECTIONS = ("finetune", "inference", "overhead", "compile", "checkpoint", "weights")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9, help="alternating rounds per measurement (default 9)")
    parser.add_argument("--quick", action="store_true", help="3 rounds per measurement")
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--only", default=",".join(SECTIONS))
    args = parser.parse_args(argv)
    rounds = 3 if args.quick else args.repeat
    only = [s for s in SECTIONS if s in set(args.only.split(","))]
    set_threads(2)
    versions = f"{machine()}, torch {torch.__version__}, commit {_commit()}"
    start_load = _load()
    print(f"{versions}; load average at the start {start_load}")
    runners = {"finetune": lambda: finetune(rounds), "inference": lambda: inference(rounds),
               "overhead": lambda: overhead(rounds), "compile": lambda: compiled(rounds),
               "checkpoint": checkpoint, "weights": weights}
    texts = []
    for name in only:
        text = runners[name]()
        print(f"\n{name}:\n{text}", flush=True)
        texts.append(f"### {name}\n\n{text}")
    verdicts = summary()
    print(f"\nverdicts (load average {start_load} at the start, {_load()} at the end):\n{verdicts}")
    if args.write:
        body = (f"Measured on {versions}, 2 threads unless stated, load average {start_load} at the start and "
                f"{_load()} at the end, `python benchmarks/bench_torch.py --write` (method: the script's docstring). "
                "Ratios are TorchUST / dense (below 1: TorchUST faster or smaller).\n\n"
                + "\n\n".join(texts) + f"\n\n### verdicts\n\n{verdicts}")
        print("wrote", write_section("PyTorch layer", body))


if __name__ == "__main__":
    main()
