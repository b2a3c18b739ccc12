"""The compiler's stages one at a time: lattices, level space, loop order, conversions."""

from __future__ import annotations

import numpy as np
import pytest

import ustc
from ustc.codegen import lattice, loopir as ir, notation as nt
from ustc.codegen.compile import Operand, compile_program
from ustc.codegen.graph import loop_order
from ustc.codegen.space import Replan, Space, exactness

F = ustc.formats


def _a(name, *idx):
    return nt.Access(name, tuple(idx))


def _stmt(lhs, rhs):
    return nt.Statement(lhs, nt.number_accesses(rhs))


def test_lattice_intersection_union_universe():
    a, b = nt.number_accesses(nt.Mul(_a("A", "i"), _a("B", "i"))).children()
    mul = lattice.build(nt.Mul(a, b), (a.slot, b.slot))
    assert mul.intersection and not mul.universe and len(mul.points) == 1
    add = lattice.build(nt.Add(a, b), (a.slot, b.slot))
    assert [len(p.present) for p in add.points] == [2, 1, 1]
    assert add.alive_sets() == [frozenset({a.slot}), frozenset({b.slot})]
    plus_one = lattice.build(nt.Add(a, nt.Literal(1)), (a.slot,))
    assert plus_one.universe
    # (A + B) * A: where only B is present the value is zero, so B alone is not a point
    mixed = lattice.build(nt.Mul(nt.Add(a, b), a), (a.slot, b.slot))
    assert {p.present for p in mixed.points} == {frozenset({a.slot, b.slot}), frozenset({a.slot})}


def test_substitute_simplifies():
    e = nt.number_accesses(nt.Sub(nt.Literal(2), nt.Mul(_a("A", "i"), _a("B", "i"))))
    b = list(e.accesses())[1]
    assert str(nt.substitute(e, frozenset({b.slot}))) == "2"
    assert nt.substitute(nt.number_accesses(nt.Neg(_a("A", "i"))), frozenset({0})) is nt.ZERO


@pytest.mark.parametrize("fmt, order", [(F.CSR, ["i", "j"]), (F.CSC, ["j", "i"]),
                                        (F.DIAI, ["v_j_minus_i", "i"]),
                                        (F.BSR(2, 2), ["v_i_div2", "v_j_div2", "v_i_mod2", "v_j_mod2"])])
def test_loop_order_follows_levels(fmt, order):
    st = _stmt(_a("y", "i"), nt.Mul(_a("A", "i", "j"), _a("x", "j")))
    space = Space(st, {"A": fmt, "x": None, "y": None})
    assert loop_order(space) == order


def test_derived_indices():
    st = _stmt(_a("y", "i"), nt.Mul(_a("A", "i", "j"), _a("x", "j")))
    space = Space(st, {"A": F.DIAI, "x": None, "y": None})
    assert set(space.derived) == {"j"} and str(space.derived["j"].expr) == "v_j_minus_i + i"


def test_cycle_asks_for_conversion():
    st = _stmt(_a("C", "i", "j"), nt.Mul(_a("A", "i", "j"), _a("B", "i", "j")))
    with pytest.raises(Replan) as info:
        loop_order(Space(st, {"A": F.CSR, "B": F.CSC, "C": F.CSR}))
    assert info.value.tensor == "B" and info.value.target == F.CSR
    # (j : compressed, i : singleton) keeps its types only where they hold every pattern
    coo_t = ustc.TensorFormat.parse("(i, j) -> (j : compressed, i : singleton)")
    with pytest.raises(Replan) as info:
        loop_order(Space(st, {"A": F.CSR, "B": coo_t, "C": F.CSR}))
    assert info.value.tensor == "B" and info.value.target == ustc.TensorFormat.parse(
        "(i, j) -> (i : compressed, j : compressed)")


def _replanned(st, formats: dict) -> tuple[list[str], list[str]]:
    """The operands converted (in turn) until a loop order exists, and that order."""
    formats, converted = dict(formats), []
    for _ in range(4):
        try:
            return converted, loop_order(Space(st, formats))
        except Replan as exc:
            converted.append(exc.tensor)
            formats[exc.tensor] = exc.target
    raise AssertionError(f"no loop order after converting {converted}")


def test_conflicts_among_three_or_four_operands_are_resolved():
    """The operand converted is one whose edges alone close the cycle (CSR A against CSC B and
    D: A alone); with no such operand, more are set aside and replanned in turn."""
    prod = nt.Mul(_a("A", "i", "j"), nt.Add(_a("B", "i", "j"), _a("D", "i", "j")))
    converted, order = _replanned(_stmt(_a("C", "i", "j"), prod),
                                  {"A": F.CSR, "B": F.CSC, "D": F.CSC, "C": F.CSR})
    assert converted == ["A"] and order == ["j", "i"]
    st = _stmt(_a("C", "i", "j"), nt.Add(prod, _a("E", "i", "j")))
    converted, order = _replanned(st, {"A": F.CSR, "E": F.CSR, "B": F.CSC, "D": F.CSC, "C": F.CSR})
    assert len(converted) == 2 and len(set(converted)) == 2 and sorted(order) == ["i", "j"]


def test_conversion_warns_and_is_correct(tmp_path, monkeypatch):
    monkeypatch.setenv("USTC_CACHE_DIR", str(tmp_path))
    ustc.cache._forget()  # the warning comes with generation: no kernel from an earlier test's memory
    rng = np.random.default_rng(3)
    da, db = (rng.random((6, 5)) * (rng.random((6, 5)) < 0.5) for _ in range(2))
    a, b = ustc.Tensor.from_dense(da, "CSR"), ustc.Tensor.from_dense(db, "CSC")
    with pytest.warns(ustc.ConversionWarning, match="operand 'B'"):
        c = a * b
    np.testing.assert_allclose(c.to_dense(), da * db)
    assert c.format == F.CSR


def test_scaled_level_guards_derived_index_to_multiples():
    """``c * d`` levels: ``d = l floordiv c`` is used only under ``l % c == 0``, whatever walks l."""
    st = nt.Statement(_a("C", "i"), nt.Add(_a("A", "i"), _a("B", "i")))
    for c, kind in ((2, "delta(6)"), (3, "dense"), (2, "compressed")):
        fmt = ustc.TensorFormat.parse(f"(d) -> ({c} * d : {kind})")
        space = Space(_stmt(st.lhs, st.rhs), {"A": F.Dense(1), "B": fmt, "C": None})
        derived = space.derived["i"]
        guard = ir.eq(ir.Bin("%", ir.Var(f"v_{c}_times_i"), ir.Const(c)), 0)
        assert exactness(derived.expr) == [guard]
        ops = {t: Operand(t, f, 1, "float64") for t, f in (("A", F.Dense(1)), ("B", fmt), ("C", None))}
        body = compile_program(nt.Program((st,)), ops).functions[0].body
        conds = [s.cond for s in ir.walk(body) if isinstance(s, ir.If)]
        assert any(guard in _conjuncts(cond) for cond in conds)
    spmv = _stmt(_a("y", "i"), nt.Mul(_a("A", "i", "j"), _a("x", "j")))
    for fmt in (F.BSR(2, 2), F.DIAI):  # inverses without floordiv: no guard
        assert all(exactness(d.expr) == [] for d in Space(spmv, {"A": fmt, "x": None, "y": None}).derived.values())


def _conjuncts(e):
    if isinstance(e, ir.Bin) and e.op == "and":
        return _conjuncts(e.left) + _conjuncts(e.right)
    return [e]
