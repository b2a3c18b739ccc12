"""Kernel parameter roles: what the host passes for each parameter of a generated kernel.

A :class:`Role` is a frozen, hashable value validated at construction: a :class:`Kind` and the
fields that kind needs (:data:`FIELDS`), every other field None. Its JSON form is the list
``[kind, *fields]`` in :data:`FIELDS` order (``["pos", "A", 1]``, ``["extent", "i"]``,
``["threads"]``); the generated module's ``PLAN`` stores that form and :meth:`Role.from_json`
reads it back into an equal Role.

Kinds, by who owns the buffer:

* an input tensor ``A`` stored in a format: ``pos`` / ``crd`` / ``size`` / ``lo`` of a level,
  ``vals``; a dense operand: ``array``;
* an index's extent ``extent``, a user scalar ``scalar``, the host's thread count ``threads``;
* a sparse output assembled from coordinate lists: ``emit`` (the pass), ``out_crd`` (of a
  dimension), ``out_vals``, ``out_offsets``; written in its own format (``codegen.writer``):
  ``out_level`` (a level's ``pos`` or ``crd``), ``out_size`` / ``out_lo`` / ``out_work`` of a
  level, ``out_vals``, ``out_counts``; a dense output's flat array in an epilog pass: ``out_flat``.

One class with a kind rather than a class per kind: the consumers (the host binding arguments,
the CUDA schedule reading sizes and extents) dispatch on the kind, most kinds share the
``(tensor, level)`` fields, and one table validates and serialises them all.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Kind(enum.StrEnum):
    POS = "pos"
    CRD = "crd"
    SIZE = "size"
    LO = "lo"
    VALS = "vals"
    ARRAY = "array"
    EXTENT = "extent"
    SCALAR = "scalar"
    THREADS = "threads"
    EMIT = "emit"
    OUT_CRD = "out_crd"
    OUT_VALS = "out_vals"
    OUT_OFFSETS = "out_offsets"
    OUT_COUNTS = "out_counts"
    OUT_LEVEL = "out_level"
    OUT_SIZE = "out_size"
    OUT_LO = "out_lo"
    OUT_WORK = "out_work"
    OUT_FLAT = "out_flat"


#: the fields each kind carries, in the order of its JSON form
FIELDS: dict[Kind, tuple[str, ...]] = {
    Kind.POS: ("tensor", "level"), Kind.CRD: ("tensor", "level"), Kind.SIZE: ("tensor", "level"),
    Kind.LO: ("tensor", "level"), Kind.VALS: ("tensor",), Kind.ARRAY: ("tensor",),
    Kind.EXTENT: ("index",), Kind.SCALAR: ("name",), Kind.THREADS: (), Kind.EMIT: (),
    Kind.OUT_CRD: ("tensor", "dim"), Kind.OUT_VALS: ("tensor",), Kind.OUT_OFFSETS: ("tensor",),
    Kind.OUT_COUNTS: ("tensor",), Kind.OUT_LEVEL: ("tensor", "level", "buffer"),
    Kind.OUT_SIZE: ("tensor", "level"), Kind.OUT_LO: ("tensor", "level"), Kind.OUT_WORK: ("tensor", "level"),
    Kind.OUT_FLAT: (),
}
_TYPES = {"tensor": str, "index": str, "name": str, "buffer": str, "level": int, "dim": int}
#: an input tensor's level buffers, read at ``(level, kind)`` of its flat buffers
LEVEL_BUFFERS = frozenset({Kind.POS, Kind.CRD})
#: kinds bound to a host integer or number, not an array (a CUDA launch may read them)
SCALARS = frozenset({Kind.SIZE, Kind.LO, Kind.EXTENT, Kind.SCALAR})


@dataclass(frozen=True, slots=True)
class Role:
    """What the host passes for one kernel parameter (module docstring)."""

    kind: Kind
    tensor: str | None = None   # the tensor whose buffer (or dense array) it is
    level: int | None = None    # the tensor's level (pos, crd, size, lo, out_level, out_size, out_lo, out_work)
    dim: int | None = None      # out_crd: the output dimension whose coordinates it holds
    buffer: str | None = None   # out_level: "pos" or "crd"
    index: str | None = None    # extent: the index variable
    name: str | None = None     # scalar: the user scalar

    def __post_init__(self):
        try:
            kind = Kind(self.kind)
        except ValueError:
            raise ValueError(f"unknown kernel parameter role {self.kind!r}") from None
        object.__setattr__(self, "kind", kind)
        wanted = FIELDS[kind]
        for f, t in _TYPES.items():
            value = getattr(self, f)
            if f not in wanted:
                if value is not None:
                    raise ValueError(f"a {kind} role has no {f} (got {value!r})")
            elif not isinstance(value, t) or isinstance(value, bool) or (t is str and not value) \
                    or (t is int and value < 0):
                raise ValueError(f"a {kind} role needs {f} {'a name' if t is str else 'an integer >= 0'} "
                                 f"(got {value!r})")
        if kind is Kind.OUT_LEVEL and self.buffer not in ("pos", "crd"):
            raise ValueError(f"an out_level role's buffer is 'pos' or 'crd' (got {self.buffer!r})")

    @classmethod
    def of(cls, kind, *values) -> "Role":
        """The role of ``kind`` with its fields given positionally, in :data:`FIELDS` order."""
        try:
            kind = Kind(kind)
        except ValueError:
            raise ValueError(f"unknown kernel parameter role {kind!r}") from None
        wanted = FIELDS[kind]
        if len(values) != len(wanted):
            raise ValueError(f"a {kind} role takes {len(wanted)} field(s) {wanted}, got {values!r}")
        return cls(kind, **dict(zip(wanted, values)))

    @classmethod
    def from_json(cls, data) -> "Role":
        """The role of its JSON form ``[kind, *fields]`` (a list or tuple)."""
        if not isinstance(data, (list, tuple)) or not data:
            raise ValueError(f"a kernel parameter role is a list [kind, *fields], got {data!r}")
        return cls.of(*data)

    def to_json(self) -> list:
        """``[kind, *fields]``: strings and integers only."""
        return [self.kind.value, *(getattr(self, f) for f in FIELDS[self.kind])]

    def __str__(self) -> str:
        return " ".join(str(v) for v in self.to_json())

    def describe(self) -> str:
        """The role in an error message: ``pos of 'A' level 1``, ``the extent of index 'i'``."""
        kind = self.kind
        if kind is Kind.SCALAR:
            return f"the scalar '{self.name}'"
        if kind is Kind.EXTENT:
            return f"the extent of index '{self.index}'"
        if kind is Kind.ARRAY:
            return f"the dense operand '{self.tensor}'"
        if self.tensor is None:
            return f"the {kind} parameter"
        where = self.level if self.level is not None else self.dim
        return f"{kind} of '{self.tensor}'" + (f" level {where}" if where is not None else "")
