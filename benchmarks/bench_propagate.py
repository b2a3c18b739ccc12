"""Sparsity propagation (``ustc.torch.propagate``) against dense and sparse baselines, on the CPU.

    python benchmarks/bench_propagate.py [--rounds N] [--threads 1,2] [--only mlp,gpt] [--write]

SparTA (OSDI '22) reports 1.7-8.4x lower inference latency than dense and
sparse baselines after propagating sparsity attributes and specialising
kernels. This measures the same idea here, float32, under ``torch.no_grad()`` (torch's
CSR ``F.linear`` refuses inference tensors):

* models: the MLP of ``examples/torch_reformat.py`` at width 512
  (512-2048-2048-512), 32 rows; a GPT-style stack of 4 ``Block(512)`` of that
  file (4 heads, MLP 2048, pre-norm, residual adds), 1 x 32 tokens;
* pruning: ``90% unstructured`` (``prune_model(amount=0.9)``, per layer by
  magnitude) and ``90% structured`` (``torch.nn.utils.prune.ln_structured``,
  amount 0.9, dim 0, on every ``nn.Linear``: whole rows by L2 norm, biases
  kept); for the MLP also dense weights with 95% zero activations (each
  ReLU-fed bias lowered by its outputs' 95th percentile on the example input),
  where only the sparse ReLU can help;
* competitors, on the same pruned weights: ``dense`` (the pruned model as
  is), ``ustc reformat`` (``reformat_model``'s default formats, no
  propagation: the sparse baseline), ``torch CSR`` (each weight a torch
  sparse CSR tensor) and ``propagate`` (``ustc.torch.propagate`` with timing:
  rows and columns dropped, each layer's format the fastest of dense / ustc's
  default choice on its example input, sparse ReLU where faster).

Times: every round calls each competitor in turn (one untimed call, then
back-to-back calls for about 20 ms), ``--rounds`` rounds; the table gives
medians, the quartiles over rounds and the fastest round (on a loaded
machine the noise only adds time). ``--threads`` lists the thread counts
for torch and Numba, one pass each (default ``1,2``: the 2-core project
machine is shared, so one thread is the steadier measure). With ``--write`` the
table replaces the ``Sparsity propagation`` section of docs/benchmarks.md.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as `import ustc` sets it; torch's OpenMP starts at import

import argparse
import copy
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
from torch import nn
from torch.nn.utils import prune

from _common import machine, quartiles, write_section

import ustc.torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from torch_reformat import Block, mlp  # noqa: E402


def gpt(dim: int = 512, layers: int = 4) -> nn.Module:
    return nn.Sequential(*(Block(dim) for _ in range(layers))).eval()


def pruned(model: nn.Module, kind: str) -> nn.Module:
    """``model`` pruned in place, 90% unstructured or 90% of the rows of every Linear; returned."""
    if kind == "unstructured":
        ustc.torch.prune_model(model, 0.9)
        return model
    for module in model.modules():
        if isinstance(module, nn.Linear):
            prune.ln_structured(module, "weight", amount=0.9, n=2, dim=0)
            prune.remove(module, "weight")
    return model


def sparse_activations(model: nn.Sequential, x: torch.Tensor, share: float = 0.95) -> nn.Module:
    """``model`` (Linear / ReLU layers) with each ReLU-fed layer's bias lowered by its outputs'
    ``share`` quantile on ``x``: about that share of every ReLU's outputs are 0 (as in ReLU models
    trained for activation sparsity). Weights stay dense."""
    with torch.no_grad():
        h = x
        for layer, after in zip(model, list(model)[1:] + [None]):
            if isinstance(layer, nn.Linear) and isinstance(after, nn.ReLU):
                layer.bias -= torch.quantile(layer(h), share, dim=0)
            h = layer(h)
    return model


def torch_csr(model: nn.Module) -> nn.Module:
    """A copy whose Linear weights are torch sparse CSR tensors (F.linear runs torch's sparse kernel)."""
    model = copy.deepcopy(model)
    for module in model.modules():
        if isinstance(module, nn.Linear):
            module.weight = nn.Parameter(module.weight.detach().to_sparse_csr(), requires_grad=False)
    return model


def reformatted(model: nn.Module) -> nn.Module:
    model = copy.deepcopy(model)
    ustc.torch.reformat_model(model)
    return model


def samples_ms(fns: dict, rounds: int, sample_s: float = 0.02) -> dict:
    """``{name: [ms per call, one per round]}``: the competitors alternate in every round."""
    out = {name: [] for name in fns}
    inner = {}
    for name, fn in fns.items():
        fn()
        start = time.perf_counter()
        fn()
        inner[name] = max(1, int(sample_s / max(time.perf_counter() - start, 1e-6)))
    for _ in range(rounds):
        for name, fn in fns.items():
            fn()
            start = time.perf_counter()
            for _ in range(inner[name]):
                fn()
            out[name].append((time.perf_counter() - start) / inner[name] * 1e3)
    return out


def case(label: str, model: nn.Module, x: torch.Tensor, rounds: int) -> tuple:
    """``(rows of the table, propagate's report, seconds propagate took)``."""
    start = time.perf_counter()
    fast, report = ustc.torch.propagate(model, x)
    took = time.perf_counter() - start
    competitors = {"dense": model, "ustc reformat": reformatted(model), "torch CSR": torch_csr(model),
                   "propagate": fast}
    with torch.no_grad():  # torch's CSR linear refuses inference tensors
        want = model(x)
        errors = {name: float((m(x) - want).abs().max() / want.abs().max()) for name, m in competitors.items()}
        ms = samples_ms({name: (lambda m=m: m(x)) for name, m in competitors.items()}, rounds)
    dense = statistics.median(ms["dense"])
    fastest_baseline = min(statistics.median(ms[name]) for name in competitors if name != "propagate")
    rows = []
    for name in competitors:
        q1, mid, q3 = quartiles(ms[name])
        rows.append((label, name, mid, q1, q3, min(ms[name]), dense / mid,
                     fastest_baseline / mid if name == "propagate" else None, errors[name]))
    return rows, report, took


def table(rows) -> str:
    lines = ["| threads | model, pruning | competitor | ms (median) | quartiles | fastest round | dense / this | "
             "best baseline / this | max rel. diff |", "|---:|---|---|---:|---:|---:|---:|---:|---:|"]
    for threads, label, name, mid, q1, q3, fastest, vs_dense, vs_best, err in rows:
        best = "" if vs_best is None else f"**{vs_best:.2f}**"
        lines.append(f"| {threads} | {label} | {name} | {mid:.3f} | {q1:.3f}-{q3:.3f} | {fastest:.3f} | "
                     f"{vs_dense:.2f} | {best} | {err:.1e} |")
    return "\n".join(lines)


def layer_lines(report, limit: int = 6) -> str:
    """The first layers of a report: shape before and after, format, µs before and after."""
    lines = ["| layer | shape | after | weight | format | µs before | µs after |", "|---|---|---|---|---|---:|---:|"]
    for r in report.layers[:limit]:
        lines.append(f"| {r.name} | {'x'.join(map(str, r.shape_before))} | {'x'.join(map(str, r.shape_after))} | "
                     f"{r.weight.summary()} | {r.format} | {r.us_before or 0:.1f} | {r.us_after or 0:.1f} |")
    return "\n".join(lines)


CASES = (("MLP 512-2048-2048-512", lambda: mlp(512).eval(), (32, 512)),
         ("GPT 4 x Block(512), MLP 2048", gpt, (1, 32, 512)))


def run(threads: int, only: set, rounds: int) -> tuple:
    """All cases with ``threads`` threads for torch and Numba: ``(table rows, per-layer details)``."""
    import numba

    torch.set_num_threads(threads)
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    rows, details = [], []
    for name, build, shape in CASES:
        if name.split()[0].lower() not in only:
            continue
        for kind in ("unstructured", "structured") + (("activations",) if name.startswith("MLP") else ()):
            torch.manual_seed(0)
            x = torch.randn(*shape)
            model = sparse_activations(build(), x) if kind == "activations" else pruned(build(), kind)
            label = "dense weights, 95% zero activations" if kind == "activations" else f"90% {kind}"
            found, report, took = case(f"{name}, {label}", model, x, rounds)
            rows += [(threads, *row) for row in found]
            details.append(f"{name}, {label}, {threads} thread(s) (propagate took {took:.1f} s; "
                           f"{len(report.conversions)} gathers / scatters):\n\n{layer_lines(report)}")
            print(f"{threads} thread(s), propagate took {took:.1f} s\n{table(rows[-4:])}\n{report}", flush=True)
    return rows, details


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--threads", default="1,2", help="thread counts, one pass each (default 1,2)")
    parser.add_argument("--only", default="mlp,gpt")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
    only = set(args.only.split(","))
    print(f"{machine()}, torch {torch.__version__}")
    rows, details = [], []
    load = os.getloadavg()[0]
    for threads in (int(t) for t in args.threads.split(",")):
        found, more = run(threads, only, args.rounds)
        rows += found
        details = details or more  # the first pass's layers: the others repeat them
    load = (load + os.getloadavg()[0]) / 2
    text = table(rows)
    print(f"\n{text}")
    if args.write:
        body = (f"Measured on {machine()}, torch {torch.__version__}, load average about {load:.0f} (a shared "
                f"machine), `python benchmarks/bench_propagate.py --write` (float32, `torch.no_grad()`, "
                f"{args.rounds} alternating rounds; quartiles over rounds; each thread count a pass of its own, "
                f"for torch and Numba alike). SparTA's claim: 1.7-8.4x over dense and sparse baselines. "
                f"`best baseline / this`: the fastest of dense, ustc reformat and torch CSR divided by "
                f"propagate's time (above 1: propagate is faster).\n\n" + text +
                "\n\nPer layer (propagate's report, first layers; µs are medians of 5 rounds inside "
                "`propagate`, noisier than the table above):\n\n" + "\n\n".join(details))
        print("wrote", write_section("Sparsity propagation", body))


if __name__ == "__main__":
    main()
