"""``TensorDecomposer(tensor, visit).run()``: call ``visit(indices, value)`` for every stored
entry in storage order (padding included), as nvmath-python's test helper of that name does."""

from __future__ import annotations


class TensorDecomposer:
    def __init__(self, tensor, visit):
        self.tensor, self.visit = tensor, visit

    def run(self, stream=None) -> None:
        coords, values = self.tensor.entries()
        for e in range(len(values)):
            self.visit([int(c[e]) for c in coords], values[e].item())
