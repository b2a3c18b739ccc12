"""PyTorch inference with reformatted weights: time and weight bytes, dense vs TorchUST, on the CPU.

    python benchmarks/bench_torch.py [--repeat N] [--write]

Cases (float32, ``torch.inference_mode``): single ``nn.Linear`` layers
(2048 x 2048; 2:4 pruned -> Structured(2, 4), 80% and 95% unstructured ->
CSR) at batch 1 (a GEMV, single-token decoding) and batch 16; the MLP and the
transformer-style block of ``examples/torch_reformat.py``. The dense model is
the pruned one, so both compute the same function (the largest relative
difference is reported). Weight bytes: the ``nn.Linear`` weights only (values
plus index buffers). Times are medians of ``--repeat`` samples, each the mean of
20 back-to-back calls after a warm-up call (plans and kernels are ready: the
steady state of inference). With
``--write`` the table replaces the ``PyTorch layer`` section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import torch
from torch import nn

from _common import machine, per_call_ms, write_section

import ustc.torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from torch_reformat import Block, mlp, prune_block  # noqa: E402


def weight_bytes(model: nn.Module) -> int:
    total = 0
    for module in model.modules():
        if isinstance(module, nn.Linear):
            w = module.weight
            total += w.storage_bytes if isinstance(w, ustc.torch.TorchUST) else w.numel() * w.element_size()
    return total


def measure(name: str, model: nn.Module, x: torch.Tensor, repeat: int) -> tuple:
    dense = copy.deepcopy(model)
    summary = ustc.torch.reformat_model(model)
    formats = ", ".join(sorted({s.format for s in summary.layers}))
    with torch.inference_mode():
        want, got = dense(x), model(x)
        error = float((got - want).abs().max() / want.abs().max())
        ms_dense, ms_ust = (per_call_ms(lambda f=f: f(x), repeat, 20) for f in (dense, model))
    bd, bu = weight_bytes(dense), weight_bytes(model)
    return (name, formats, tuple(x.shape), bd, bu, ms_dense, ms_ust, error)


def layer(n: int, method: str, amount: float = 0.5) -> nn.Module:
    model = nn.Sequential(nn.Linear(n, n)).eval()
    ustc.torch.prune_model(model, amount, method=method)
    return model


def cases(repeat: int):
    torch.manual_seed(0)
    rows = []
    for label, method, amount in (("2:4", "2:4", 0.5), ("80% unstructured", "magnitude", 0.8),
                                  ("95% unstructured", "magnitude", 0.95)):
        for batch in (1, 16):
            rows.append(measure(f"Linear 2048x2048, {label}", layer(2048, method, amount),
                                torch.randn(batch, 2048), repeat))
    model = mlp(256).eval()
    ustc.torch.prune_model(model, method="2:4")
    rows.append(measure("MLP 256-1024-1024-256, 2:4", model, torch.randn(32, 256), repeat))
    block = Block(256).eval()
    prune_block(block)
    rows.append(measure("block: 2:4 attention, 80% MLP", block, torch.randn(2, 32, 256), repeat))
    return rows


def table(rows) -> str:
    lines = ["| model | formats | input | weight bytes dense | TorchUST | bytes ratio | dense ms | TorchUST ms | "
             "time ratio | max rel. diff |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, fmts, shape, bd, bu, md, mu, err in rows:
        lines.append(f"| {name} | {fmts} | {'x'.join(map(str, shape))} | {bd:,} | {bu:,} | {bu / bd:.2f} | "
                     f"{md:.2f} | {mu:.2f} | {mu / md:.2f} | {err:.1e} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(torch.get_num_threads())
    text = table(cases(args.repeat))
    print(text)
    if args.write:
        body = (f"Measured on {machine()}, torch {torch.__version__} ({torch.get_num_threads()} threads), "
                f"`python benchmarks/bench_torch.py --write`.\n\n"
                "Inference (`torch.inference_mode`) with the pruned dense model against the same model after "
                "`ustc.torch.reformat_model` (default choice: Structured(2, 4) with uint8 in-block coordinates "
                "for 2:4 weights, CSR with uint16 columns above 50% zeros). Ratios are TorchUST / dense "
                "(below 1: TorchUST smaller or faster). Steady state: plans and kernels are ready, so every "
                "product is a plan-cache hit that only executes.\n\n" + text)
        print("wrote", write_section("PyTorch layer", body))


if __name__ == "__main__":
    main()
