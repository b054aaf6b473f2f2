"""The ``posenc-np`` command line (also ``python -m posenc_np``).

Subcommands::

    posenc-np golden generate --out DIR [--format json|npz|both] [--only NAME ...]
    posenc-np golden verify DIR
    posenc-np golden list
    posenc-np study extrapolation --out DIR [--quick]
"""

from __future__ import annotations

import argparse
import sys

from ._version import __version__


def _golden_generate(args) -> int:
    from .golden import runner

    formats = ("json", "npz") if args.format == "both" else (args.format,)
    progress = None if args.quiet else (lambda name: print(f"  oracle: {name}", file=sys.stderr))
    rows = runner.generate(args.out, formats=formats, only=args.only, progress=progress)
    print(f"wrote {len(rows)} cases ({', '.join(formats)}) to {args.out}; library float64 vs oracle:")
    print(runner.format_table(rows))
    return 0 if all(r.ok for r in rows) else 1


def _golden_verify(args) -> int:
    from .golden import runner

    rows = runner.verify(args.dir)
    print(f"verifying {args.dir}: schema, checksums, JSON/NPZ agreement, index, library recomputation")
    print(runner.format_table(rows))
    return 0 if all(r.ok for r in rows) else 1


def _golden_list(args) -> int:
    from .golden import catalogue

    specs = catalogue.cases(args.only)
    width = max(len(s.name) for s in specs)
    for s in specs:
        print(f"{s.name:<{width}}  {s.encoding:<16}  {s.description}")
    print(f"{len(specs)} cases")
    return 0


def _study(args) -> int:
    from .study import run_extrapolation_cli

    return run_extrapolation_cli(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="posenc-np", description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="version", version=f"posenc-np {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    golden = sub.add_parser("golden", help="generate, verify and list golden test vectors",
                            description="Golden test vectors computed by an mpmath oracle (>= 50 digits).")
    gsub = golden.add_subparsers(dest="golden_command", required=True)
    gen = gsub.add_parser("generate", help="evaluate the oracle and write the suite",
                          description="Evaluate every case with the mpmath oracle, round once to float64, "
                                      "write case files plus index.json, and report the library's error.")
    gen.add_argument("--out", required=True, help="output directory (created if missing)")
    gen.add_argument("--format", choices=("json", "npz", "both"), default="both", help="file format(s)")
    gen.add_argument("--only", nargs="+", metavar="NAME", help="case names or glob patterns (e.g. 'rope.*')")
    gen.add_argument("--quiet", action="store_true", help="do not print per-case progress")
    gen.set_defaults(func=_golden_generate)
    ver = gsub.add_parser("verify", help="check a suite: schema, checksums, recomputation",
                          description="Validate every case file in DIR (schema, SHA-256, JSON/NPZ agreement, "
                                      "index.json) and recompute it with the library. Exit code 1 on any failure.")
    ver.add_argument("dir", help="directory holding case files")
    ver.set_defaults(func=_golden_verify)
    lst = gsub.add_parser("list", help="list the cases in the catalogue",
                          description="List catalogue case names, encodings and descriptions.")
    lst.add_argument("--only", nargs="+", metavar="NAME", help="case names or glob patterns")
    lst.set_defaults(func=_golden_list)

    study = sub.add_parser("study", help="experiments with trained models",
                           description="Train small NumPy transformers and compare position encodings.")
    ssub = study.add_subparsers(dest="study_command", required=True)
    ext = ssub.add_parser("extrapolation", help="length-extrapolation study",
                          description="Train one model per encoding on synthetic tasks at length L and "
                                      "evaluate at L, 2L and 4L.")
    ext.add_argument("--out", required=True, help="output directory")
    ext.add_argument("--quick", action="store_true", help="reduced grid (under a minute)")
    ext.add_argument("--seed", type=int, default=0, help="base random seed")
    ext.add_argument("--no-progress", action="store_true", help="do not show progress")
    ext.set_defaults(func=_study)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"posenc-np: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
