"""The plan of one statement's kernel: what the host does around the call (a stage boundary).

The compiler (``codegen.compile``) makes a :class:`StatementPlan` per statement; the generated
module stores their JSON form as ``PLAN = [{...}, ...]`` (strings, numbers, booleans, lists and
string-keyed dicts only, so the cached module stays plain data), and :func:`plans_of` reads a
loaded module's ``PLAN`` back into equal, validated plans, once per module.

Fields (JSON keys are the field names; the last four are written only when set):

* ``function``: the kernel function; ``params``: its parameters' :class:`~codegen.roles.Role` s;
* ``convert``: ``(operand, format text)`` pairs the host converts first; ``alias``: ``(alias,
  operand)`` pairs, an operand read twice under a second name (converted on its own);
* ``order``: the loop order (index variables); ``statement``: the statement's text;
* ``sparse_output``; ``rows``: the index whose row offsets a row-parallel sparse output fills;
  ``accumulate`` (``+=``); ``overwrites``: a dense output whose every element the kernel stores
  (no zero-fill); ``writer``: 0, or the passes (2, 3) of a sparse output written in its own
  format; ``workspace``: the index a reduction folds through a dense workspace row;
* ``split``: the writer's chunks run in parallel; ``semiring``: its name, when not plus-times;
  ``epilog``: ``"fused"``, ``"host"``, or the name of the pass the host runs after the kernel;
  ``serial``: the serial twin of a parallel CPU kernel.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .roles import Role

_REQUIRED = ("function", "params", "convert", "alias", "order", "sparse_output", "rows", "statement",
             "accumulate", "overwrites", "writer", "workspace")
_OPTIONAL = ("split", "semiring", "epilog", "serial")


@dataclass(frozen=True)
class StatementPlan:
    """What the host does for one statement's kernel (module docstring)."""

    function: str
    params: tuple[Role, ...]
    convert: tuple[tuple[str, str], ...] = ()
    alias: tuple[tuple[str, str], ...] = ()
    order: tuple[str, ...] = ()
    sparse_output: bool = False
    rows: str | None = None
    statement: str = ""
    accumulate: bool = False
    overwrites: bool = False
    writer: int = 0
    workspace: str | None = None
    split: bool = False
    semiring: str | None = None
    epilog: str | None = None
    serial: str | None = None

    def __post_init__(self):
        for f in ("convert", "alias"):  # a mapping given as a dict keeps its order as pairs
            value = getattr(self, f)
            pairs = tuple(value.items()) if isinstance(value, dict) else tuple(tuple(p) for p in value)
            object.__setattr__(self, f, pairs)
            if not all(len(p) == 2 and all(isinstance(x, str) and x for x in p) for p in pairs):
                self._bad(f, "(name, name) pairs", value)
        object.__setattr__(self, "params", tuple(self.params))
        object.__setattr__(self, "order", tuple(self.order))
        if not isinstance(self.function, str) or not self.function.isidentifier():
            self._bad("function", "a function name", self.function)
        if not all(isinstance(r, Role) for r in self.params):
            self._bad("params", "codegen.roles.Role values", self.params)
        if not all(isinstance(v, str) and v for v in self.order):
            self._bad("order", "index names", self.order)
        for f in ("sparse_output", "accumulate", "overwrites", "split"):
            if not isinstance(getattr(self, f), bool):
                self._bad(f, "a bool", getattr(self, f))
        for f in ("rows", "workspace", "semiring", "epilog", "serial"):
            value = getattr(self, f)
            if value is not None and not (isinstance(value, str) and value):
                self._bad(f, "a name or None", value)
        if not isinstance(self.statement, str):
            self._bad("statement", "its text", self.statement)
        if self.writer not in (0, 2, 3) or isinstance(self.writer, bool):
            self._bad("writer", "0, 2 or 3 passes", self.writer)
        if self.writer and not self.sparse_output:
            self._bad("writer", "0 for a dense output", self.writer)
        if self.split and not self.writer:
            self._bad("split", "False without a writer", self.split)
        for f in ("function", "serial"):
            if getattr(self, f) is not None and not getattr(self, f).isidentifier():
                self._bad(f, "a function name", getattr(self, f))

    def _bad(self, field: str, wanted: str, got) -> None:
        raise ValueError(f"kernel plan {getattr(self, 'function', '?')!r}: {field} must be {wanted}, got {got!r}")

    # -- the module's PLAN entry -------------------------------------------------------------
    def to_json(self) -> dict:
        """The JSON-able dict the generated module stores (required keys in a fixed order, the
        optional ones only when set)."""
        out = {"function": self.function, "params": [r.to_json() for r in self.params],
               "convert": dict(self.convert), "alias": dict(self.alias), "order": list(self.order),
               "sparse_output": self.sparse_output, "rows": self.rows, "statement": self.statement,
               "accumulate": self.accumulate, "overwrites": self.overwrites, "writer": self.writer,
               "workspace": self.workspace}
        for f in _OPTIONAL:
            value = getattr(self, f)
            if value:
                out[f] = value
        return out

    @classmethod
    def from_json(cls, data) -> "StatementPlan":
        """The plan of a module's ``PLAN`` entry; ValueError naming what is missing or wrong."""
        if not isinstance(data, dict):
            raise ValueError(f"a kernel plan is a dict, got {type(data).__name__}")
        missing = [k for k in _REQUIRED if k not in data]
        unknown = [k for k in data if k not in _REQUIRED and k not in _OPTIONAL]
        if missing or unknown:
            raise ValueError(f"kernel plan {data.get('function')!r}: " + "; ".join(
                part for part in (f"missing {missing}" if missing else "", f"unknown {unknown}" if unknown else "")
                if part))
        for f in ("convert", "alias"):
            if not isinstance(data[f], dict):
                raise ValueError(f"kernel plan {data.get('function')!r}: {f} must be a dict, got {data[f]!r}")
        if not isinstance(data["params"], (list, tuple)) or not isinstance(data["order"], (list, tuple)):
            raise ValueError(f"kernel plan {data.get('function')!r}: params and order must be lists")
        fields = dict(data)
        fields["params"] = tuple(Role.from_json(r) for r in data["params"])
        return cls(**fields)

    def replace(self, **changes) -> "StatementPlan":
        return dataclasses.replace(self, **changes)


def plans_text(plans) -> str:
    """The generated module's ``PLAN = [...]`` line."""
    return f"PLAN = {[p.to_json() for p in plans]!r}"


def plans_of(module) -> tuple[StatementPlan, ...]:
    """The typed plans of a loaded kernel module's ``PLAN``, read once and kept on the module."""
    typed = module.__dict__.get("_PLANS")
    if typed is None:
        try:
            typed = tuple(StatementPlan.from_json(p) for p in module.PLAN)
        except ValueError as exc:
            raise ValueError(f"{getattr(module, '__file__', module.__name__)}: {exc}") from exc
        module._PLANS = typed
    return typed
