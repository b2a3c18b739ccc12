"""``ustc compile``: print the kernel ustc generates for an operation, without real data.

    ustc compile CSR --op spmv                       # the generated Python/Numba source
    ustc compile "BSR(2, 2)" --op spmm --emit asm    # machine code of the compiled kernel
    ustc compile --expr 'C[i,j] = A[i,j] * B[i,k] * D[k,j]' --format A=CSR

An operation is a named one (``--op``, see :mod:`ustc.ops.library`) on the
FORMATs given, or one or more index-notation statements (``--expr``, as in an
``@ustc.jit`` body; tensors without ``--format NAME=FORMAT`` are dense arrays,
outputs included). The kernel is specialised for placeholder operands: zero
tensors of the given formats, ``--dtype`` values and ``--index-dtype`` index
buffers (a format that fixes its own widths keeps them), with every index of
extent 4 (or the least common multiple of 4 and the format's block sizes)
unless ``--shape INDEX=N`` says otherwise. Extents are run-time arguments, so
the code does not depend on them. ``--emit source`` prints the module kept in
the kernel cache (``ustc cache``); ``llvm`` and ``asm`` run the kernel once on
the placeholders and print Numba's LLVM IR / assembly for every kernel
function. ``--target cuda`` emits the numba-cuda module (``source``) or PTX for
sm_90 (``ptx``, each kernel also linked to a cubin with nvJitLink; ``--verbose``
adds registers against the schedule's budget, spills, local and shared memory,
occupancy and the static checks of :mod:`ustc.codegen.cuda_checks`); neither needs
a GPU or a CUDA driver. A comment
header names the command and the index dtypes used.

Errors print ``ustc compile: error: ...`` to stderr and exit 1; usage errors exit 2.
"""

from __future__ import annotations

import argparse
import math
import re
import shlex
import sys
import warnings

import numpy as np

from ..errors import UstcError

DTYPES = ("float64", "float32", "int64", "int32", "complex128", "complex64")
INDEX_DTYPES = ("int32", "int64")
EMITS = ("source", "llvm", "asm", "ptx")
TARGETS = ("cpu", "cuda")
CUDA_EMITS = ("source", "ptx")
_MAX_EXTENT = 1 << 12
_MAX_ELEMENTS = 1 << 24


class _Usage(Exception):
    """A usage error: argparse's message and exit status 2."""


def _format(text: str, what: str):
    from ..format.ir import TensorFormat

    try:
        return TensorFormat.parse(text)
    except UstcError as exc:
        raise UstcError(f"{what}: {exc}") from None


def _pairs(items, what: str, value) -> dict:
    out = {}
    for item in items or ():
        for part in ([item] if what == "--format" else item.split(",")):
            name, sep, rest = part.partition("=")
            name, rest = name.strip(), rest.strip()
            if not sep or not name or not rest:
                raise _Usage(f"{what} expects NAME=VALUE, got {part!r}")
            if name in out:
                raise _Usage(f"{what} gives '{name}' twice")
            out[name] = value(rest, f"{what} {name}")
    return out


def _extent(text: str, what: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise _Usage(f"{what}: expected a positive integer, got {text!r}") from None
    if not 0 < n <= 1 << 31:
        raise _Usage(f"{what}: expected a positive integer, got {text!r}")
    return n


def _program(args):
    """(program, {tensor: format or None}, ranks) from --op FORMAT... or --expr."""
    from ..ops import library

    if args.expr:
        if args.formats or args.op:
            raise _Usage("give either FORMAT... --op OP or --expr, not both")
        if args.to is not None or args.axis is not None:
            raise _Usage("--to and --axis belong to --op; write the statement with --expr instead")
        named = _pairs(args.named_formats, "--format", _format)
        program = library.parse_program(args.expr)
        formats, ranks = library.expr_operands(program, named)
        return program, formats, ranks
    if args.named_formats:
        raise _Usage("--format NAME=FORMAT belongs to --expr; with --op give the FORMATs positionally")
    if not args.op:
        raise _Usage("give --op OP with FORMAT..., or --expr 'T[i] = ...'")
    formats = [_format(text, f"FORMAT {k + 1}") for k, text in enumerate(args.formats)]
    to = _format(args.to, "--to") if args.to is not None else None
    return library.operation(args.op, formats, to=to, axis=args.axis)


def _default_extent(formats) -> int:
    """4, or a multiple of every block / group size written in the formats (so they tile)."""
    sizes = [int(n) for fmt in formats if fmt is not None for n in re.findall(r"\b\d+\b", fmt.signature)]
    extent = math.lcm(4, *[n for n in sizes if n > 0])
    return extent if extent <= _MAX_EXTENT else 8


def _index_cast(tensor, index_dtype: np.dtype):
    """``tensor`` with pos / crd buffers of ``index_dtype`` where the format does not fix them."""
    from ..tensor.tensor import Tensor

    fmt = tensor.format
    buffers = {}
    for (k, name), b in tensor.raw_buffers.items():
        fixed = (getattr(fmt.levels[k].type, "crd_dtype", None) is not None and name == "crd") \
            or (name == "pos" and fmt.pos_width) or (name == "crd" and fmt.crd_width)
        buffers[(k, name)] = b if fixed else b.astype(index_dtype)
    return Tensor(fmt, tensor.shape, buffers, tensor.values)


def placeholders(program, formats, dtype: str = "float64", index_dtype: str = "int32",
                 shape: dict | None = None) -> tuple[dict, dict]:
    """Bindings of zero operands for ``program``; returns (bindings, {index: extent})."""
    from ..tensor.tensor import Tensor

    value_dtype, idx_dtype = np.dtype(dtype), np.dtype(index_dtype)
    indices: list[str] = []
    first: dict[str, tuple[str, ...]] = {}
    for st in program.statements:
        for access in [st.lhs, *st.rhs.accesses()]:
            first.setdefault(access.tensor, access.indices)
            indices += [i for i in access.indices if i not in indices]
    shape = dict(shape or {})
    unknown = [i for i in shape if i not in indices]
    if unknown:
        raise UstcError(f"--shape {unknown[0]}=...: no index '{unknown[0]}' in {program} "
                        f"(indices: {', '.join(indices)})")
    default = _default_extent(formats.values())
    extents = {i: shape.get(i, default) for i in indices}
    outputs = set(program.outputs)
    bindings: dict = {}
    for name in program.tensors:
        fmt, dims = formats[name], tuple(extents[i] for i in first[name])
        if math.prod(dims) > _MAX_ELEMENTS and (fmt is None or name not in outputs):
            raise UstcError(f"placeholder {name} of shape {dims} is too large (over {_MAX_ELEMENTS} elements); "
                            f"the kernel does not depend on extents, so choose smaller ones with --shape")
        if fmt is None:
            bindings[name] = np.zeros(dims, value_dtype)
        elif name in outputs:
            bindings[name] = fmt
        else:
            try:  # an empty tensor: assembled from no entries, never through a dense array
                tensor = Tensor.from_coo([np.zeros(0, np.int64)] * len(dims), np.zeros(0, value_dtype), dims, fmt)
            except UstcError as exc:
                raise UstcError(f"cannot build a placeholder {name} of shape {dims} in {fmt}: {exc} "
                                f"(choose extents with --shape INDEX=N)") from None
            bindings[name] = _index_cast(tensor, idx_dtype)
    scalar = value_dtype.type(0).item()
    for st in program.statements:
        for s in st.rhs.scalars():
            bindings[s] = scalar
    return bindings, extents


def _command(args) -> str:
    words = ["ustc", "compile"]
    if args.expr:
        for text in args.expr:
            words += ["--expr", text]
        for item in args.named_formats or ():
            words += ["--format", item]
    else:
        words += list(args.formats) + ["--op", args.op]
        if args.to is not None:
            words += ["--to", args.to]
        if args.axis is not None:
            words += ["--axis", str(args.axis)]
    for item in args.shape or ():
        words += ["--shape", item]
    words += ["--target", args.target, "--dtype", args.dtype, "--index-dtype", args.index_dtype,
              "--emit", args.emit]
    if args.schedule and args.target == "cuda":
        words += ["--schedule", args.schedule]
    return " ".join(shlex.quote(w) for w in words)


def _header(args, bindings, extents, notes, comment: str) -> str:
    from ..tensor.tensor import Tensor

    lines = [_command(args),
             "placeholders: zeros, " + ", ".join(f"{i}={n}" for i, n in extents.items())]
    for name, value in bindings.items():
        if isinstance(value, Tensor):
            order = sorted(value.raw_buffers, key=lambda key: (key[0], key[1] != "pos"))
            used = ", ".join(f"{kind}[{k}] {value.raw_buffers[(k, kind)].dtype}" for k, kind in order) or "none"
            lines.append(f"index dtypes of {name}: {used}")
    lines += [f"note: {n}" for n in notes]
    # one comment line per physical line: an --expr holding a newline must not end the comment
    return "".join(f"{comment} {part}\n" for line in lines for part in line.splitlines())


def _conversions(plans) -> list[str]:
    """What the host converts before each kernel (from the module's PLAN)."""
    notes = []
    for plan in plans:
        for name, fmt in plan.convert:
            original = dict(plan.alias).get(name)
            what = f"'{original}' (read as {name})" if original else f"'{name}'"
            notes.append(f"{plan.function} first converts operand {what} to {fmt} (the formats' level "
                         f"orders or derived levels do not co-iterate as stored)")
    return notes


def _machine_code(run, module, emit: str) -> str:
    """LLVM IR or assembly of every kernel function, compiled for the placeholder arguments."""
    import numba

    from ..codegen.plans import plans_of

    run.run()  # compiles (or loads) each function for the placeholders' types
    parts = []
    comment = ";" if emit == "llvm" else "#"
    for plan in plans_of(module):
        fn = getattr(module, plan.function)
        options = {k: v for k, v in fn.targetoptions.items() if k != "nopython"}
        # small placeholders run the serial twin, if any: its signatures are the function's too
        twin = getattr(module, plan.serial) if plan.serial else fn
        for sig in dict.fromkeys(fn.signatures or twin.signatures):
            # a fresh, uncached dispatcher: one loaded from Numba's cache has no LLVM IR left
            fresh = numba.njit(**options)(fn.py_func)
            fresh.compile(sig)
            text = fresh.inspect_llvm(sig) if emit == "llvm" else fresh.inspect_asm(sig)
            types = ", ".join(str(t) for t in sig)
            parts.append(f"{comment} ---- {plan.function}: {plan.statement}\n"
                         f"{comment}      ({types})\n{text.rstrip()}\n")
    return "\n".join(parts)


def _ptx(run_, verbose: bool) -> str:
    """PTX for sm_90 of every CUDA kernel, compiled with its launch bounds and linked to a
    cubin with nvJitLink; ``verbose`` adds each kernel's resources, occupancy and static
    checks (:mod:`ustc.codegen.cuda_checks`)."""
    from ..codegen import cuda_checks

    parts = []
    for k in cuda_checks.check_run(run_):
        lines = [f"// ---- {k.name}: {k.statement}", f"//      ({k.signature})"]
        if verbose:
            lines += [f"// {line}" for line in k.summary().split("; ")]
        parts.append("\n".join(lines) + "\n" + k.ptx.rstrip() + "\n")
    return "\n".join(parts)


def run(args) -> int:
    from .. import cache
    from ..codegen.plans import plans_of
    from ..ops import runtime

    if args.target == "cuda" and args.emit not in CUDA_EMITS:
        raise UstcError(f"--target cuda emits {' or '.join(CUDA_EMITS)} (got --emit {args.emit})")
    if args.emit == "ptx" and args.target != "cuda":
        raise UstcError("--emit ptx needs --target cuda")
    shape = _pairs(args.shape, "--shape", _extent)
    program, formats, _ = _program(args)
    bindings, extents = placeholders(program, formats, args.dtype, args.index_dtype, shape)
    with warnings.catch_warnings():
        # conversions are reported from the module's PLAN (the same on a cache hit), Numba's
        # performance hints do not concern a listing
        warnings.simplefilter("ignore")
        run_ = runtime.prepare(program, bindings, args.target, args.schedule if args.target == "cuda" else None)
        module, key = cache.load(run_.fields, run_.generate)
        if args.emit == "source":  # this key's own file (a source twin's module may run)
            with open(cache.source_file(key), encoding="utf-8") as fh:
                body = fh.read()
        elif args.emit == "ptx":
            body = _ptx(run_, args.verbose)
        else:
            body = _machine_code(run_, module, args.emit)
    notes = _conversions(plans_of(module))
    comment = ";" if args.emit == "llvm" else "//" if args.emit == "ptx" else "#"
    text = _header(args, bindings, extents, notes, comment) + body
    if not text.endswith("\n"):
        text += "\n"
    if args.output:
        with open(args.output, "w", encoding="utf-8") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)
    return 0


def _guarded(parser):
    def command(args) -> int:
        try:
            return run(args)
        except _Usage as exc:
            parser.error(str(exc))  # exits 2
        except UstcError as exc:
            message = str(exc).rstrip() or type(exc).__name__
        except OSError as exc:
            message = f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": ")
        except Exception as exc:  # noqa: BLE001 - a Numba failure compiling the kernel
            from numba.core.errors import NumbaError

            if not isinstance(exc, NumbaError):
                raise
            message = f"numba could not compile the kernel: {exc}"
        print(f"ustc compile: error: {message}", file=sys.stderr)
        return 1
    return command


def register(sub) -> None:
    """Add the ``compile`` command to the ``ustc`` subparsers ``sub``."""
    from ..ops.library import OPERATIONS

    ops = "\n".join(f"  {name:<8} {desc}" for name, (_, desc) in OPERATIONS.items())
    parser = sub.add_parser(
        "compile", help="print the kernel generated for an operation (source, LLVM IR or assembly)",
        usage="ustc compile FORMAT... --op OP [--to FORMAT] [--axis N] [options]\n"
              "       ustc compile --expr STATEMENT [--expr ...] [--format NAME=FORMAT ...] [options]",
        description="Print the kernel ustc generates for an operation on tensors of the given formats.\n"
                    "FORMAT is DSL text or a named format (see 'ustc formats'). Operands are zero\n"
                    "placeholders; extents are run-time arguments of the kernel.",
        epilog=f"operations (--op):\n{ops}\n\nexamples:\n  ustc compile CSR --op spmv\n"
               f"  ustc compile 'BSR(2, 2)' --op spmm --emit asm -o spmm.s\n"
               f"  ustc compile --expr 'C[i,j] = A[i,j] * B[i,k] * D[k,j]' --format A=CSR",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("formats", nargs="*", metavar="FORMAT", help="operand formats (A, then B for add/mul)")
    parser.add_argument("--op", metavar="OP", help="named operation: " + ", ".join(OPERATIONS))
    parser.add_argument("--to", metavar="FORMAT", help="output format of --op convert")
    parser.add_argument("--axis", type=int, metavar="N", help="axis summed by --op sum (default: all)")
    parser.add_argument("--expr", action="append", metavar="STATEMENT",
                        help="an index-notation statement such as 'y[i] = A[i,j] * x[j]' (repeatable; '+=' too)")
    parser.add_argument("--format", action="append", dest="named_formats", metavar="NAME=FORMAT",
                        help="the format of tensor NAME in --expr (repeatable; others are dense arrays)")
    parser.add_argument("--shape", action="append", metavar="INDEX=N",
                        help="placeholder extent of an index, e.g. i=100 (repeatable or comma-separated)")
    parser.add_argument("--target", choices=TARGETS, default="cpu", help="default: cpu")
    parser.add_argument("--dtype", choices=DTYPES, default="float64", help="value dtype (default: float64)")
    parser.add_argument("--index-dtype", choices=INDEX_DTYPES, default="int32",
                        help="dtype of pos/crd buffers (default: int32)")
    parser.add_argument("--emit", choices=EMITS, default="source", help="default: source")
    parser.add_argument("--schedule", metavar="KIND[:WIDTH]",
                        help="cuda: thread_per_row, warp_per_row[:LANES], merge_path, block_tile[:LANES[:LOOP]] "
                             "or serial (default: chosen per kernel)")
    parser.add_argument("--verbose", action="store_true",
                        help="with --emit ptx: registers (and budget), spills, memory, occupancy and static checks "
                             "of each kernel")
    parser.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    parser.set_defaults(run=_guarded(parser))
