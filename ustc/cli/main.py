"""``ustc`` subcommands: demo, formats, info, compile, cache."""

from __future__ import annotations

import argparse
import sys

from . import cache_cmd, compile_cmd, demo, info


def _formats(args) -> int:
    from .. import formats
    from .table import render

    rows = [(name, text) for name, _, text in formats.table()]
    print(render(("name", "DSL"), rows))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ustc", description="ustc, a sparse tensor compiler")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="show what ustc can do, with real output").set_defaults(run=demo.run)
    sub.add_parser("formats", help="list the named formats with their DSL text").set_defaults(run=_formats)
    sub.add_parser("info", help="versions, targets and cache directory").set_defaults(run=info.run)
    compile_cmd.register(sub)
    cache_cmd.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
