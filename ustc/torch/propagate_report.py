"""What ``ustc.torch.propagate`` found and did: per layer and for the model; ``str()`` is a table."""

from __future__ import annotations

from dataclasses import dataclass

from .propagate_attrs import FeatureSparsity, WeightSparsity


@dataclass(frozen=True)
class LayerReport:
    """One ``nn.Linear``: its weight's and activations' sparsity attributes, its shape before and after
    (rows and columns dropped), the format chosen for what remains (``"sparse_relu + dense"`` where a
    sparse ReLU feeds it), the weight's bytes, and its time on the example inputs (µs, medians; None
    when not measured: ``us_after`` of a fused layer includes the ReLU)."""

    name: str
    weight: WeightSparsity
    input: FeatureSparsity
    output: FeatureSparsity
    shape_before: tuple
    shape_after: tuple
    format: str
    bytes_before: int
    bytes_after: int
    us_before: float | None = None
    us_after: float | None = None
    folded: int = 0

    @property
    def rows_dropped(self) -> int:
        return self.shape_before[0] - self.shape_after[0]

    @property
    def cols_dropped(self) -> int:
        return self.shape_before[1] - self.shape_after[1]


@dataclass(frozen=True)
class PropagationReport:
    """``layers``: a :class:`LayerReport` per ``nn.Linear``; ``activations``: ``(node, FeatureSparsity)``
    for every feature tensor of the traced graph; ``boundaries``: where propagation stopped and why;
    ``conversions``: the gathers and scatters put in; ``opaque``: submodules fx could not trace (kept
    whole); model time before / after on the example inputs (µs: medians and the per-round samples);
    ``max_abs_diff``: the largest difference between the two models' outputs on the example inputs."""

    layers: tuple = ()
    activations: tuple = ()
    boundaries: tuple = ()
    conversions: tuple = ()
    opaque: tuple = ()
    us_before: float | None = None
    us_after: float | None = None
    samples_before: tuple = ()
    samples_after: tuple = ()
    max_abs_diff: float = 0.0

    @property
    def bytes_before(self) -> int:
        return sum(layer.bytes_before for layer in self.layers)

    @property
    def bytes_after(self) -> int:
        return sum(layer.bytes_after for layer in self.layers)

    @property
    def speedup(self) -> float | None:
        """Model time before / after (above 1: faster), or None when not measured."""
        if not self.us_before or not self.us_after:
            return None
        return self.us_before / self.us_after

    def layer(self, name: str) -> LayerReport:
        """The report of the layer named ``name`` (KeyError where there is none)."""
        for layer in self.layers:
            if layer.name == name:
                return layer
        raise KeyError(name)

    def __str__(self) -> str:
        return "\n".join(_table(self.layers) + _notes(self))


def _us(value) -> str:
    return "-" if value is None else f"{value:.1f}"


def _table(layers) -> list:
    head = (f"{'layer':<16} {'shape':>11} {'after':>11} {'weight':<34} {'in':<34} {'out':<34} {'format':<18} "
            f"{'bytes':>9} {'after':>9} {'µs':>8} {'after':>8}")
    rows = [head]
    for r in layers:
        rows.append(f"{r.name:<16} {'x'.join(map(str, r.shape_before)):>11} {'x'.join(map(str, r.shape_after)):>11} "
                    f"{r.weight.summary():<34} {r.input.summary():<34} {r.output.summary():<34} {r.format:<18} "
                    f"{r.bytes_before:>9} {r.bytes_after:>9} {_us(r.us_before):>8} {_us(r.us_after):>8}")
    return rows


def _notes(report: PropagationReport) -> list:
    lines = []
    for title, items in (("boundaries", report.boundaries), ("conversions", report.conversions),
                         ("opaque (not traced)", report.opaque)):
        if items:
            lines.append(f"{title}:")
            lines += [f"  {item}" for item in items]
    model = f"model: weights {report.bytes_before} -> {report.bytes_after} bytes"
    if report.speedup is not None:
        model += f", {report.us_before:.1f} -> {report.us_after:.1f} µs ({report.speedup:.2f}x)"
    lines.append(model + f", max |difference| {report.max_abs_diff:.1e}")
    return lines
