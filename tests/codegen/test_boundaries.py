"""Typed stage boundaries: kernel parameter roles and statement plans are validated values whose
JSON form (what a cached kernel module stores) reads back into equal objects."""

from __future__ import annotations

import json
import types

import pytest

from ustc import formats as F
from ustc.codegen import loopir as ir
from ustc.codegen import notation as nt
from ustc.codegen.compile import Operand, compile_program
from ustc.codegen.plans import StatementPlan, plans_of, plans_text
from ustc.codegen.roles import FIELDS, Kind, Role


def _a(t, *idx):
    return nt.Access(t, idx)


ROLES = [Role.of("pos", "A", 1), Role.of("crd", "A", 0), Role.of("size", "A", 2), Role.of("lo", "B", 0),
         Role.of("vals", "A"), Role.of("array", "x"), Role.of("extent", "i"), Role.of("scalar", "alpha"),
         Role.of("threads"), Role.of("emit"), Role.of("out_crd", "C", 1), Role.of("out_vals", "C"),
         Role.of("out_offsets", "C"), Role.of("out_counts", "C"), Role.of("out_level", "C", 1, "pos"),
         Role.of("out_size", "C", 2), Role.of("out_lo", "C", 0), Role.of("out_work", "C", 0), Role.of("out_flat")]


def test_every_kind_round_trips_through_json():
    assert {r.kind for r in ROLES} == set(Kind) == set(FIELDS)
    for role in ROLES:
        data = json.loads(json.dumps(role.to_json()))
        again = Role.from_json(data)
        assert again == role and hash(again) == hash(role) and type(again.kind) is Kind
    assert Role.of("pos", "A", 1).to_json() == ["pos", "A", 1]
    assert Role(Kind.EXTENT, index="i") == Role.of("extent", "i") and Role.of("extent", "i").index == "i"
    assert len(set(ROLES)) == len(ROLES)


@pytest.mark.parametrize("bad", [
    ("nope", "A"),               # no such kind
    ("pos", "A"),                # a level is missing
    ("pos", "A", -1),            # a negative level
    ("pos", "A", True),          # a bool is no level
    ("pos", "", 0),              # an empty tensor name
    ("vals", "A", 0),            # a field the kind does not have
    ("out_level", "C", 0, "values"),
    ("threads", "x"),
])
def test_malformed_roles_are_refused(bad):
    with pytest.raises(ValueError):
        Role.of(*bad)


def test_fields_a_kind_lacks_are_refused_and_params_need_roles():
    with pytest.raises(ValueError, match="no level"):
        Role(Kind.VALS, "A", level=1)
    with pytest.raises(TypeError, match="Role"):
        ir.Param("A_vals", ("vals", "A"))


def test_role_descriptions():
    assert Role.of("pos", "A", 1).describe() == "pos of 'A' level 1"
    assert Role.of("extent", "i").describe() == "the extent of index 'i'"
    assert Role.of("array", "x").describe() == "the dense operand 'x'"


def _module(statement, formats):
    ops = {t: Operand(t, formats.get(t), 2 if t in formats else len(a.indices), "float64")
           for t, a in ((a.tensor, a) for a in [statement.lhs, *statement.rhs.accesses()])}
    return compile_program(nt.Program((statement,)), ops)


def test_compiled_plans_load_back_from_the_module_text():
    """A generated module's PLAN (plain data) reads back into plans equal to the compiler's."""
    spmv = nt.Statement(_a("y", "i"), nt.Mul(_a("A", "i", "j"), _a("x", "j")), accumulate=True)
    spgemm = nt.Statement(_a("C", "i", "j"), nt.Mul(_a("A", "i", "k"), _a("B", "k", "j")))
    for statement, formats in ((spmv, {"A": F.CSR}), (spgemm, {"A": F.CSR, "B": F.CSR, "C": F.DCSR})):
        plans = _module(statement, formats).meta["plan"]
        assert all(isinstance(p, StatementPlan) for p in plans)
        namespace: dict = {}
        exec(plans_text(plans), namespace)  # noqa: S102 - the module's own PLAN line
        module = types.ModuleType("fake_kernel_module")
        module.PLAN = namespace["PLAN"]
        json.dumps(module.PLAN)                  # JSON-able on disk
        loaded = plans_of(module)
        assert loaded == tuple(plans) and plans_of(module) is loaded   # read once per module
        assert all(isinstance(r, Role) for p in loaded for r in p.params)


def test_plans_refuse_what_they_do_not_know():
    good = StatementPlan("kernel_0", (Role.of("array", "y"),), order=("i",), statement="y[i] = x[i]").to_json()
    assert StatementPlan.from_json(good).function == "kernel_0"
    for change in ({"writer": 1}, {"function": "not a name"}, {"params": [["pos", "A"]]}, {"convert": [1]},
                   {"rows": 3}, {"spare": True}, {"split": True}):
        with pytest.raises(ValueError):
            StatementPlan.from_json({**good, **change})
    missing = dict(good)
    del missing["order"]
    with pytest.raises(ValueError, match="missing"):
        StatementPlan.from_json(missing)
    module = types.ModuleType("broken_kernel_module")
    module.PLAN = [{**good, "writer": 7}]
    with pytest.raises(ValueError, match="writer"):
        plans_of(module)
