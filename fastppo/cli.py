"""``fastppo`` command line: argument parsing -> config -> trainer/runner. No logic here.

Sections: ``train``/``eval`` (owned with fastppo.ppo) and ``bench`` (owned with
fastppo._bench). Each ``_add_*`` function declares its arguments and sets
``func`` to the entry point that does the work.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def _add_bench(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="benchmark the kernels against numpy and installed peers")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="small, fast subset (under 60 s)")
    size.add_argument("--full", action="store_true", help="every size and every installed peer")
    p.add_argument(
        "--out", default="bench_out", help="directory for JSON and PNG (default: bench_out)"
    )
    p.add_argument("--only", default=None, help="run only groups whose name contains this text")
    p.add_argument(
        "--no-startup",
        dest="startup",
        action="store_false",
        help="skip the import / first-call / warmup() latency measurement (2 fresh processes)",
    )

    def run(ns: argparse.Namespace) -> int:
        from fastppo._bench.runner import main as bench_main

        return bench_main(
            quick=ns.quick, full=ns.full, out=ns.out, only=ns.only, startup=ns.startup
        )

    p.set_defaults(func=run)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fastppo", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    _add_bench(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    return int(ns.func(ns) or 0)


if __name__ == "__main__":
    sys.exit(main())
