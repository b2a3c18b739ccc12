"""``ustc cache``: list, show, stats, clear, path, prune and warm the on-disk kernel cache.

Every subcommand exits 0 on success; an error prints one line to stderr and exits 1. Counters
of :func:`ustc.cache.stats` are per process, so ``ustc cache stats`` reports what the disk
records across processes instead: entries, bytes, hits, recorded compile seconds, and the
compile seconds saved estimated as the sum over entries of ``hits * compile_seconds``.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time

from ..errors import UstcError

_WIDTH_OP = 40
_WIDTH_FORMAT = 36


def _shorten(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 3] + "..."


@functools.lru_cache(maxsize=1)
def _format_names() -> dict[str, str]:
    """Canonical format text -> name, for the named formats (parameterised ones at common sizes)."""
    try:
        from .. import formats
    except Exception:  # noqa: BLE001 - names are a nicety; fall back to the text
        return {}
    names: dict[str, str] = {}
    for nf in formats.NAMED:
        if not nf.params:
            names.setdefault(str(nf.format()), nf.name)
    for rank in range(1, 5):
        names.setdefault(str(formats.Dense(rank)), "Dense" if rank == 2 else f"Dense({rank})")
        if rank >= 2:
            names.setdefault(str(formats.COO(rank)), "COO" if rank == 2 else f"COO({rank})")
            names.setdefault(str(formats.CSF(rank)), f"CSF({rank})")
    return names


def short_format(signature: str) -> str:
    """A named format's name, else the level list of the signature, shortened."""
    name = _format_names().get(signature)
    if name:
        return name
    levels = signature.split("->", 1)[-1].strip()
    return _shorten(levels.replace(" : ", ":"), _WIDTH_FORMAT)


def human_time(when: float, now: float | None = None) -> str:
    """'just now', 'N min ago', 'N h ago' within a day, else local 'YYYY-MM-DD HH:MM'."""
    age = (time.time() if now is None else now) - when
    if 0 <= age < 60:
        return "just now"
    if 0 <= age < 3600:
        return f"{int(age // 60)} min ago"
    if 0 <= age < 86400:
        return f"{int(age // 3600)} h ago"
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(when))


def human_bytes(size: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(size)  # pragma: no cover


def _list(args) -> int:
    from .. import cache
    from .table import render

    found = cache.entries()
    if not found:
        print(f"no cached kernels in {cache.kernels_dir()}")
        return 0
    now = time.time()
    rows = [(e.key[:12], _shorten(e.op, _WIDTH_OP), e.target, ",".join(map(str, e.dtypes)),
             " ; ".join(short_format(str(f)) for f in e.formats), human_bytes(e.size), e.hits,
             human_time(e.last_used, now)) for e in found]
    print(render(("key", "op", "target", "dtypes", "formats", "size", "hits", "last used"), rows))
    return 0


def _show(args) -> int:
    from .. import cache
    from ..cache import _store

    entry = cache.show(args.key)
    try:
        record = _store.read_record(_store.files(entry.key)[1])
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UstcError(f"cannot read the record of {entry.key[:12]}: {exc}") from exc
    text = cache.source(entry.key)
    stamp = lambda t: time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))  # noqa: E731
    seconds = lambda s: "-" if s is None else f"{s:.3f} s"  # noqa: E731
    lines = [("key", entry.key), ("module", cache.module_name(entry.key)), ("file", str(entry.path)),
             ("op", entry.op), ("target", entry.target), ("dtypes", ", ".join(map(str, entry.dtypes)))]
    lines += [("format", str(f)) for f in entry.formats]
    lines += [(f"field {name}", repr(value)) for name, value in sorted(record["fields"].items())
              if name not in ("op", "target", "dtypes", "formats")]
    lines += [("size", f"{entry.size} bytes"), ("sha256", record["sha256"]), ("hits", str(entry.hits)),
              ("created", stamp(entry.created)), ("last used", stamp(entry.last_used)),
              ("generate", seconds(record.get("generate_seconds"))), ("compile", seconds(entry.compile_seconds)),
              ("ustc", str(record.get("ustc"))), ("numba", str(record.get("numba")))]
    width = max(len(name) for name, _ in lines)
    for name, value in lines:
        print(f"{name.ljust(width)} : {value}")
    print()
    print(text, end="" if text.endswith("\n") else "\n")
    return 0


def _stats(args) -> int:
    from .. import cache
    from .table import render

    found = cache.entries()
    total_bytes = cache.stats()["bytes"]
    hits = sum(e.hits for e in found)
    compile_seconds = sum(e.compile_seconds or 0.0 for e in found)
    saved = sum(e.hits * (e.compile_seconds or 0.0) for e in found)
    rows = [("directory", cache.kernels_dir()), ("entries", len(found)),
            ("bytes", f"{total_bytes} ({human_bytes(total_bytes)})"),
            ("source bytes", sum(e.size for e in found)), ("hits", hits),
            ("compile seconds", f"{compile_seconds:.3f}"),
            ("compile seconds saved (est.)", f"{saved:.3f}")]
    print(render(("statistic", "value"), rows))
    return 0


def _clear(args) -> int:
    from .. import cache

    removed = cache.clear()
    print(f"removed {removed} cached kernel{'s' if removed != 1 else ''} from {cache.kernels_dir()}")
    return 0


def _path(args) -> int:
    from .. import cache

    print(cache.path())
    return 0


def _prune(args) -> int:
    from .. import cache

    if args.older_than is None and args.max_size is None:
        args.prune_parser.error("give --older-than DAYS, --max-size SIZE or both")
    if args.older_than is not None:
        removed = cache.prune(args.older_than)
        days = args.older_than
        print(f"removed {removed} cached kernel{'s' if removed != 1 else ''} "
              f"not used for {days:g} day{'s' if days != 1 else ''}")
    if args.max_size is not None:
        removed = cache.trim(args.max_size)
        print(f"removed {removed} least recently used kernel{'s' if removed != 1 else ''} "
              f"to fit {_size_text(args.max_size)}")
    return 0


def _size(text: str) -> int:
    from ..cache._manage import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _size_text(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n} bytes"


def _warm(args) -> int:
    from ..ops import warm

    specs = [warm.WarmSpec.parse(text) for text in args.specs] or None   # checked before any work
    t0 = time.perf_counter()
    results = warm.warm_cache(specs, processes=args.processes)
    failed = [r for r in results if r.error]
    for r in results:
        print(f"{r.spec:<{_WIDTH_OP}} {r.seconds:7.2f} s  {'FAILED: ' + r.error if r.error else 'ok'}")
    print(f"warmed {len(results) - len(failed)} of {len(results)} in {time.perf_counter() - t0:.1f} s "
          f"into {_cache_path()}")
    return 1 if failed else 0


def _cache_path():
    from .. import cache

    return cache.path()


def _days(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of days, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a non-negative number of days, got {text!r}")
    return value


def _guarded(command):
    @functools.wraps(command)
    def run(args) -> int:
        try:
            return command(args)
        except (UstcError, OSError, ValueError) as exc:
            message = " ".join(str(exc).split()) or type(exc).__name__
            print(f"ustc cache {args.cache_command}: error: {message}", file=sys.stderr)
            return 1
    return run


def register(sub) -> None:
    """Add the ``cache`` command to the ``ustc`` subparsers ``sub``."""
    parser = sub.add_parser("cache", help="inspect and manage the on-disk kernel cache",
                            description="Inspect and manage the on-disk kernel cache.")
    commands = parser.add_subparsers(dest="cache_command", required=True, metavar="COMMAND")
    commands.add_parser("list", help="list cached kernels, most recently used first").set_defaults(
        run=_guarded(_list))
    show = commands.add_parser("show", help="print a kernel's record and source")
    show.add_argument("key", metavar="KEY", help="a key prefix, as printed by 'ustc cache list'")
    show.set_defaults(run=_guarded(_show))
    commands.add_parser("stats", help="totals recorded on disk").set_defaults(run=_guarded(_stats))
    commands.add_parser("clear", help="remove every cached kernel").set_defaults(run=_guarded(_clear))
    commands.add_parser("path", help="print the cache directory").set_defaults(run=_guarded(_path))
    prune = commands.add_parser("prune", help="remove kernels not used for a while, or beyond a size")
    prune.add_argument("--older-than", metavar="DAYS", type=_days, default=None,
                       help="remove kernels last used more than DAYS days ago")
    prune.add_argument("--max-size", metavar="SIZE", type=_size, default=None,
                       help="then remove the least recently used kernels until the cache holds at most "
                            "SIZE (e.g. 500M, 2G); new kernels keep it within $USTC_CACHE_MAX_BYTES "
                            "(default 2G) by themselves")
    prune.set_defaults(run=_guarded(_prune), prune_parser=prune)
    warm = commands.add_parser("warm", help="compile chosen operations ahead of time, in parallel processes",
                               description="Compile and cache the kernels of operations given as "
                                           "OP:FORMATS:DTYPE (e.g. spmv:CSR:float64, add:CSR,COO:float32); "
                                           "without specs, a default set for CSR in float64 and float32.")
    warm.add_argument("specs", nargs="*", metavar="SPEC", help="OP:FORMATS:DTYPE")
    warm.add_argument("--processes", "-j", type=int, default=None, help="worker processes (default: CPU count)")
    warm.set_defaults(run=_guarded(_warm))
