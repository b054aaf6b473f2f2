"""The ``posenc-np`` command line (also ``python -m posenc_np``).

Subcommands::

    posenc-np golden generate --out DIR [--suite v2|v3] [--force | --update] [--format json|npz|both]
                              [--only NAME ...] [--hf-config config.json [--max-position P]] [--jobs N] [--no-progress]
    posenc-np golden verify DIR [--oracle] [--allow-unknown] [--hf-config config.json [--max-position P]]
    posenc-np golden list [--suite v2|v3] [--only NAME ...] [--hf-config config.json [--max-position P]]
    posenc-np golden audit [--suite v2|v3]
    posenc-np study extrapolation --out DIR [options: see posenc_np.study.cli]
    posenc-np study report DIR [--publish DOCS_DIR]
    posenc-np precision (--hf-config CONFIG_JSON | --head-dim N ...) --dtype D --max-position P --out DIR
                        [--no-progress]

Progress goes to stderr, and only when stderr is a terminal; ``--no-progress`` turns it off
there too (one spelling in every subcommand). Errors in arguments, paths or the environment
print one ``posenc-np: error: ...`` line on stderr and exit with status 2, and so does an
output that cannot be written: standard output closed (``>&-``, refused before any work) or
refusing writes (``>/dev/full``). A reader that goes away (``posenc-np golden list | head``)
ends the program quietly with status 141, as a Unix tool killed by SIGPIPE would.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from ._version import __version__
from .golden.safe_io import printable as _printable


def _model_specs(args):
    """The cases of ``--hf-config`` (a model's positional setup), or None for the library's catalogue."""
    if args.hf_config is None:
        if args.max_position is not None:
            raise ValueError("--max-position needs --hf-config (the catalogue's positions are fixed)")
        return None
    from .golden import model_cases
    from .hf_config import read_hf_config

    return model_cases.cases_for(read_hf_config(args.hf_config, max_position=args.max_position))


def _progress(total: int, enabled: bool):
    """A per-case progress callback and its closer, shown only when stderr is a terminal (a log gets
    none): a tqdm bar when tqdm is installed, else one line per case."""
    if not (enabled and sys.stderr is not None and sys.stderr.isatty()):
        return None, lambda: None
    try:
        from tqdm import tqdm
    except ImportError:
        return (lambda name: print(f"  oracle: {_printable(name)}", file=sys.stderr)), lambda: None
    bar = tqdm(total=total, desc="golden cases", unit="case", file=sys.stderr, leave=False)
    return (lambda name: bar.update(1)), bar.close


def _golden_generate(args) -> int:
    from .golden import catalogue, runner

    formats = ("json", "npz") if args.format == "both" else (args.format,)
    mode = "force" if args.force else "update" if args.update else "new"
    specs = _model_specs(args)
    total = len(catalogue.select(catalogue.cases(suite=args.suite) if specs is None else specs, args.only))
    progress, close = _progress(total, not args.no_progress)
    try:
        rows = runner.generate(args.out, formats=formats, only=args.only, mode=mode, progress=progress, specs=specs,
                               jobs=args.jobs, suite=args.suite)
    finally:
        close()
    print(f"wrote {len(rows)} cases ({', '.join(formats)}) to {_printable(args.out)}; library float64 vs oracle:")
    print(runner.format_table(rows))
    return 0 if all(r.ok for r in rows) else 1


def _golden_verify(args) -> int:
    from .golden import runner

    specs = _model_specs(args)
    known = None if specs is None else {s.name: s for s in specs}.get
    rows = runner.verify(args.dir, oracle=args.oracle, known=known)
    trusted = "the catalogue" if specs is None else f"the cases of {_printable(args.hf_config)}"
    print(f"verifying {_printable(args.dir)} against {trusted}: manifest and SHA-256 of every file, format, "
          f"parameters and tolerances, library recomputation{', oracle bit-equality' if args.oracle else ''}")
    print(runner.format_table(rows))
    unknown = sum(r.status == runner.UNKNOWN for r in rows)
    if unknown and not args.allow_unknown:
        hint = "" if specs is not None else " (a suite generated with --hf-config is verified with the same --hf-config)"
        print(f"{unknown} cases are unknown to {trusted} and were checked for format only{hint}; "
              "the exit status is 1 unless --allow-unknown is given")
    accepted = {runner.PASS, runner.UNKNOWN} if args.allow_unknown else {runner.PASS}
    return 0 if all(r.status in accepted for r in rows) else 1


def _golden_list(args) -> int:
    from .golden import catalogue

    specs = _model_specs(args)
    specs = catalogue.select(catalogue.cases(suite=args.suite) if specs is None else specs, args.only)
    width = max(len(s.name) for s in specs)
    for s in specs:
        print(f"{s.name:<{width}}  {s.encoding:<16}  {s.description}")
    print(f"{len(specs)} cases")
    return 0


def _golden_audit(args) -> int:
    from .golden import audit

    caught = audit.audit(suite=args.suite)
    print(audit.format_audit(caught))
    return 0 if all(len(v) >= audit.MIN_CATCHES for v in caught.values()) else 1


def _suite(text: str) -> int:
    if text not in ("v2", "v3"):
        raise argparse.ArgumentTypeError(f"must be v2 or v3, got {text!r}")
    return int(text[1])


def positive_int(text: str) -> int:
    """An argparse ``type``: ``text`` as an integer >= 1 (also the study's options)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def _precision(args) -> int:
    from .precision_report import run_cli

    return run_cli(args)


def _add_precision_parser(sub) -> None:
    from .precision import DTYPES

    prec = sub.add_parser(
        "precision", help="how accurate is a RoPE configuration's table in a dtype, per recipe",
        description="Measure the RoPE tables of common pipelines (Hugging Face float32, Meta complex64, llama.cpp, "
                    "reduced-precision casts, this library) against exact values for one configuration, dtype and "
                    "maximum position; write precision.json, precision.md and precision.png (matplotlib) into --out "
                    "and name the first position where each recipe exceeds the thresholds.")
    src = prec.add_mutually_exclusive_group(required=True)
    src.add_argument("--hf-config", metavar="CONFIG_JSON", help="a Hugging Face config.json")
    src.add_argument("--head-dim", type=int, help="head dim (explicit parameters instead of a config)")
    prec.add_argument("--base", type=float, help="rope_theta with --head-dim (default 10000)")
    prec.add_argument("--scaling", metavar="JSON", help="a rope_scaling / rope_parameters dict as JSON, with --head-dim")
    prec.add_argument("--max-position-embeddings", type=int, help="the model's context (scaling types that need it)")
    prec.add_argument("--dtype", choices=DTYPES, default="float32", help="the model's dtype (default float32)")
    prec.add_argument("--max-position", type=int,
                      help="largest position to measure (default: the config's max_position_embeddings)")
    prec.add_argument("--out", required=True, help="output directory")
    prec.add_argument("--force", action="store_true", help="overwrite precision.* files this tool did not write")
    prec.add_argument("--table-threshold", type=float, default=1e-3, help="table-entry error threshold (1e-3)")
    prec.add_argument("--logit-threshold", type=float, default=1e-2, help="logit error threshold (1e-2)")
    prec.add_argument("--scan-limit", type=int, default=2 ** 18,
                      help="scan every position below this for the first crossing (default 262144)")
    prec.add_argument("--seed", type=int, default=0, help="seed of the sampled positions and random q/k")
    prec.add_argument("--no-progress", action="store_true", help="no progress bar or summary")
    prec.set_defaults(func=_precision)


class _Parser(argparse.ArgumentParser):
    """Usage errors as one ``posenc-np <command>: error: ...`` line, status 2 (``--help`` shows the usage)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {_printable(message)} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``posenc-np`` argument parser with every subcommand."""
    parser = _Parser(prog="posenc-np", description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="version", version=f"posenc-np {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    golden = sub.add_parser("golden", help="generate, verify and list golden test vectors",
                            description="Golden test vectors computed by an mpmath oracle (>= 50 digits).")
    gsub = golden.add_subparsers(dest="golden_command", required=True)
    gen = gsub.add_parser("generate", help="evaluate the oracle and write the suite",
                          description="Evaluate every case with the mpmath oracle, round once to float64, and "
                                      "write case files, index.json and SHA256SUMS (each file to a temporary "
                                      "name, then renamed into place), then report the library's error. "
                                      "Refuses a non-empty --out unless --force or --update.")
    gen.add_argument("--out", required=True,
                     help="output directory: created if missing; must be empty unless --force or --update")
    suite = {"type": _suite, "default": 3, "metavar": "v2|v3",
             "help": "suite version (its catalogue): v3 (default) or v2 (vectors/v2); verify reads it from the files"}
    gen.add_argument("--suite", **suite)
    mode = gen.add_mutually_exclusive_group()
    mode.add_argument("--force", action="store_true",
                      help="replace the suite in --out (only a suite written by posenc-np: its index.json "
                           "and nothing but the files it lists)")
    mode.add_argument("--update", action="store_true",
                      help="add or replace the selected cases in the --suite version suite in --out, keep the others "
                           "(also finishes cases an interrupted run left pending)")
    gen.add_argument("--format", choices=("json", "npz", "both"), default="both", help="file format(s)")
    gen.add_argument("--only", nargs="+", metavar="NAME", help="case names or glob patterns (e.g. 'rope.*')")
    gen.add_argument("--no-progress", action="store_true",
                     help="no progress on stderr (shown only when stderr is a terminal anyway)")
    gen.add_argument("--jobs", type=positive_int, default=os.cpu_count() or 1, metavar="N",
                     help="processes evaluating the oracle (default: the number of CPUs); the files do not "
                          "depend on it")
    gen.add_argument("--hf-config", metavar="CONFIG_JSON",
                     help="write the cases of this Hugging Face config.json's positional setup (RoPE with its "
                          "scaling, ALiBi, T5 or DeBERTa buckets) instead of the library's catalogue, with "
                          "positions reaching the model's context; verify them with the same --hf-config")
    gen.set_defaults(func=_golden_generate)
    max_position = {"type": positive_int, "metavar": "P", "help": "with --hf-config: the largest position the cases reach "
                    "(default: the config's context); give verify the same"}
    gen.add_argument("--max-position", **max_position)
    ver = gsub.add_parser("verify", help="check a suite against the catalogue and the library",
                          description="Check DIR: index.json lists exactly the files present with their SHA-256 "
                                      "(and SHA256SUMS agrees), every file follows the format within its limits, "
                                      "every case the catalogue knows has the catalogue's parameters, inputs and "
                                      "tolerance, and the library reproduces its outputs within that tolerance. "
                                      "Exit status 1 on any failure, and on cases unknown to the catalogue "
                                      "(checked for format only) unless --allow-unknown.")
    ver.add_argument("dir", help="directory holding a golden suite")
    ver.add_argument("--oracle", action="store_true",
                     help="also recompute the mpmath oracle and require the stored outputs bit for bit")
    ver.add_argument("--allow-unknown", action="store_true",
                     help="exit 0 even if some cases are unknown to the catalogue (they are still reported)")
    ver.add_argument("--hf-config", metavar="CONFIG_JSON",
                     help="trust the cases of this config.json (for a suite written by generate --hf-config): "
                          "their parameters and tolerances come from the config, not from the files")
    ver.add_argument("--max-position", **max_position)
    ver.set_defaults(func=_golden_verify)
    lst = gsub.add_parser("list", help="list the cases in the catalogue",
                          description="List catalogue case names, encodings and descriptions.")
    lst.add_argument("--only", nargs="+", metavar="NAME", help="case names or glob patterns")
    lst.add_argument("--suite", **suite)
    lst.add_argument("--hf-config", metavar="CONFIG_JSON", help="list the cases of this config.json instead")
    lst.add_argument("--max-position", **max_position)
    lst.set_defaults(func=_golden_list)
    aud = gsub.add_parser("audit", help="perturb every case parameter and count the cases that catch it",
                          description="Perturb each parameter of each catalogue case and count the cases whose "
                                      "expected values the library then misses; exit status 1 if one is caught by "
                                      "fewer than two cases.")
    aud.add_argument("--suite", **suite)
    aud.set_defaults(func=_golden_audit)

    from .study.cli import add_parser as _add_study_parser  # the study's options live with the study

    _add_study_parser(sub)
    _add_precision_parser(sub)
    return parser


def main(argv=None) -> int:
    """Run the command line; returns the exit status (0 ok, 1 a check failed, 2 an error)."""
    if sys.stdout is None:  # started with stdout closed (``>&-``): the results could not be reported
        return _error("standard output is closed, so nothing could be reported; redirect it instead "
                      "(e.g. >/dev/null)")
    try:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit:  # --help or --version printed, or a usage error on stderr
            sys.stdout.flush()
            raise
        status = args.func(args)
        sys.stdout.flush()  # a closed pipe or a full disk shows up here, inside the handlers below
        return status
    except BrokenPipeError:
        # the reader went away (``| head``): stop quietly, and keep the interpreter's final
        # flush from reporting the same broken pipe
        _discard_stdout()
        return 128 + signal.SIGPIPE
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
    except (ValueError, TypeError, OSError) as exc:  # the library refuses bad input with these
        try:
            sys.stdout.flush()  # what the command printed before the error, if stdout takes it
        except OSError as write_error:
            _discard_stdout()
            exc = f"cannot write the output: {write_error.strerror or write_error}"
        return _error(exc)


def _error(message) -> int:
    """Print ``posenc-np: error: <message>`` on stderr (if it is open); return exit status 2."""
    if sys.stderr is not None:
        print(f"posenc-np: error: {_printable(message)}", file=sys.stderr)
    return 2


def _discard_stdout() -> None:
    """Point stdout's descriptor at /dev/null, so that the output still buffered (which cannot be
    written) does not make the interpreter's final flush fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
