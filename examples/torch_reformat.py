"""Prune and reformat a small MLP and a transformer-style block, then compare with the pruned dense model.

    python examples/torch_reformat.py [--dim 256] [--tokens 32]

Both models are built in plain torch (no downloads). Each linear weight is
pruned (2:4 by magnitude for the MLP, 2:4 for the attention projections and
80% unstructured for the feed-forward of the block), the pruned dense model's
output is recorded, then ``ustc.torch.reformat_model`` stores the weights as
TorchUSTs (Structured(2, 4) or CSR, chosen by the default) and the same
forward code runs through ustc kernels. Prints the reformat summary, the
largest difference to the pruned dense output, and inference times.
"""

from __future__ import annotations

import argparse
import copy
import time

import torch
from torch import nn

import ustc.torch


class Block(nn.Module):
    """Pre-norm transformer block: multi-head self-attention (q, k, v, o projections) and an MLP."""

    def __init__(self, dim: int, heads: int = 4, hidden: int = 4):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))
        self.up, self.down = nn.Linear(dim, hidden * dim), nn.Linear(hidden * dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        h = self.norm1(x)
        split = lambda y: y.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.q(h)), split(self.k(h)), split(self.v(h))
        att = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1)
        x = x + self.o((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.down(torch.relu(self.up(self.norm2(x))))


def mlp(dim: int) -> nn.Module:
    return nn.Sequential(nn.Linear(dim, 4 * dim), nn.ReLU(), nn.Linear(4 * dim, 4 * dim), nn.ReLU(),
                         nn.Linear(4 * dim, dim))


def prune_block(block: Block) -> None:
    for name in ("q", "k", "v", "o"):
        ustc.torch.prune_model(getattr(block, name), method="2:4")
    ustc.torch.prune_model(block.up, 0.8)
    ustc.torch.prune_model(block.down, 0.8)


def timed_ms(fn, repeat: int = 10) -> float:
    with torch.inference_mode():
        fn()
        samples = []
        for _ in range(repeat):
            start = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - start) * 1e3)
    return sorted(samples)[len(samples) // 2]


def run(name: str, model: nn.Module, x: torch.Tensor) -> dict:
    dense = copy.deepcopy(model)
    with torch.inference_mode():
        want = dense(x)
    summary = ustc.torch.reformat_model(model)
    with torch.inference_mode():
        got = model(x)
    error = float((got - want).abs().max() / want.abs().max())
    print(f"\n== {name}\n{summary}")
    print(f"max |difference| / max |output| = {error:.2e}")
    ms_dense, ms_ust = timed_ms(lambda: dense(x)), timed_ms(lambda: model(x))
    print(f"inference: dense {ms_dense:.2f} ms, reformatted {ms_ust:.2f} ms")
    return dict(error=error, summary=summary, ms_dense=ms_dense, ms_ust=ms_ust)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--tokens", type=int, default=32)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    model = mlp(args.dim).eval()
    ustc.torch.prune_model(model, method="2:4")
    run("MLP, 2:4 pruned", model, torch.randn(args.tokens, args.dim))
    block = Block(args.dim).eval()
    prune_block(block)
    run("transformer block: 2:4 attention, 80% sparse MLP", block, torch.randn(2, args.tokens, args.dim))


if __name__ == "__main__":
    main()
