"""PyTorch inference with reformatted weights: time and weight bytes, dense vs TorchUST, on the CPU.

    python benchmarks/bench_torch.py [--repeat N] [--write] [--only inference,overhead,compile,checkpoint]

Sections (all by default): ``inference`` (the table below), ``overhead`` (a
sparse nn.Linear call at batch 1 against the planned product alone, with the
inference path and with the general route), ``compile`` (torch.compile with
fullgraph=True against eager, batch 1), ``checkpoint`` (bytes of a saved
state_dict against the storage). Only ``--write`` touches a file: the
``inference`` table into docs/benchmarks.md; the other numbers are in
docs/torch.md. Idle OpenMP workers sleep (``OMP_WAIT_POLICY=PASSIVE``, set
here before torch starts its OpenMP runtime, as ``import ustc`` does for a
process that imports it first): spinning workers of torch's and Numba's
OpenMP made a compiled graph's 2048-element bias add take 10 ms beside a
parallel sparse product.

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

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as `import ustc` sets it; torch's OpenMP starts at import

import argparse
import copy
import io
import statistics
import sys
import time
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


def alternating_us(fns: dict, rounds: int, inner: int) -> dict:
    """Median over ``rounds`` of the mean µs of ``inner`` back-to-back calls, the functions taking turns
    in every round (a shared machine's drift spreads over all of them); one untimed call first."""
    samples = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            fn()
            start = time.perf_counter()
            for _ in range(inner):
                fn()
            samples[name].append((time.perf_counter() - start) / inner * 1e6)
    return {name: statistics.median(values) for name, values in samples.items()}


def overhead(rounds: int) -> str:
    """A sparse nn.Linear call at batch 1 under inference_mode against the planned product it runs."""
    from ustc.torch import inference
    from ustc.torch.matmul import operand

    lines = ["| layer (batch 1) | planned product µs | nn.Linear µs | ratio | general route µs | ratio | "
             "ustc.matmul µs |", "|---|---:|---:|---:|---:|---:|---:|"]
    torch.manual_seed(0)
    for label, method, amount in (("2048x2048, 2:4", "2:4", 0.5), ("2048x2048, 80% CSR", "magnitude", 0.8),
                                  ("2048x2048, 95% CSR", "magnitude", 0.95), ("512x512, 95% CSR", "magnitude", 0.95)):
        n = int(label.split("x")[0])
        model = layer(n, method, amount)
        ustc.torch.reformat_model(model)
        lin, x = model[0], torch.randn(1, n)
        weight, vector = operand(lin.weight), x.numpy().reshape(-1).copy()
        planned = ustc.Matmul(weight, vector).plan()

        def general(lin=lin, x=x):
            inference.ENABLED["on"] = False
            try:
                return lin(x)
            finally:
                inference.ENABLED["on"] = True

        inner = 200 if n < 2048 or method != "2:4" else 20
        with torch.inference_mode():
            us = alternating_us({"planned": planned.execute, "layer": lambda lin=lin, x=x: lin(x),
                                 "general": general,
                                 "matmul": lambda w=weight, v=vector: ustc.matmul(w, v)}, rounds, inner)
        lines.append(f"| {label} | {us['planned']:.1f} | {us['layer']:.1f} | {us['layer'] / us['planned']:.2f} | "
                     f"{us['general']:.1f} | {us['general'] / us['planned']:.2f} | {us['matmul']:.1f} |")
    return "\n".join(lines)


def compiled(rounds: int) -> str:
    """torch.compile(fullgraph=True) against eager at batch 1, under inference_mode."""
    lines = ["| model (batch 1) | dense eager ms | TorchUST eager ms | TorchUST compiled ms | compiled / eager | "
             "first compiled call s |", "|---|---:|---:|---:|---:|---:|"]
    torch.manual_seed(0)
    models = [("Linear 2048x2048, 2:4", layer(2048, "2:4"), torch.randn(1, 2048)),
              ("Linear 2048x2048, 95% CSR", layer(2048, "magnitude", 0.95), torch.randn(1, 2048))]
    net = mlp(256).eval()
    ustc.torch.prune_model(net, method="2:4")
    models.append(("MLP 256-1024-1024-256, 2:4", net, torch.randn(1, 256)))
    for name, model, x in models:
        dense = copy.deepcopy(model)
        ustc.torch.reformat_model(model)
        with torch.inference_mode():
            start = time.perf_counter()
            fast = torch.compile(model, fullgraph=True)
            fast(x)
            first = time.perf_counter() - start
            torch.testing.assert_close(fast(x), model(x), rtol=1e-4, atol=1e-5)
            inner = 20 if "2:4" in name and "Linear" in name else 100
            us = alternating_us({"dense": lambda m=dense, x=x: m(x), "eager": lambda m=model, x=x: m(x),
                                 "compiled": lambda m=fast, x=x: m(x)}, rounds, inner)
        lines.append(f"| {name} | {us['dense'] / 1e3:.3f} | {us['eager'] / 1e3:.3f} | {us['compiled'] / 1e3:.3f} | "
                     f"{us['compiled'] / us['eager']:.2f} | {first:.1f} |")
    return "\n".join(lines)


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
    return ("| 3 x Linear 2048x2048, 2:4 | bytes |\n|---|---:|\n"
            f"| weights and biases as stored (Structured(2, 4), uint8 in-block coordinates) | {storage:,} |\n"
            f"| torch.save(state_dict), TorchUST | {saved(model):,} |\n"
            f"| torch.save(state_dict), the dense pruned model | {dense_bytes:,} |")


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
    parser.add_argument("--only", default="inference,overhead,compile,checkpoint")
    args = parser.parse_args(argv)
    torch.set_num_threads(torch.get_num_threads())
    only = set(args.only.split(","))
    print(f"{machine()}, torch {torch.__version__} ({torch.get_num_threads()} threads)")
    for name, section in (("checkpoint", lambda: checkpoint()), ("overhead", lambda: overhead(args.repeat)),
                          ("compile", lambda: compiled(args.repeat))):
        if name in only:
            print(f"\n{name}:\n{section()}")
    if "inference" not in only:
        return
    text = table(cases(args.repeat))
    print(f"\ninference:\n{text}")
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
