"""Command line entry point: `gpudoctor <command> ...`.

Errors the user can fix print one line on stderr and exit with a documented code
(gpudoctor.base.exitcodes); they never show a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence

from gpudoctor import __version__
from gpudoctor.base import exitcodes
from gpudoctor.base.exitcodes import GpudoctorError

log = logging.getLogger(__name__)


class _Parser(argparse.ArgumentParser):
    """argparse that exits with our USAGE code and a one-line message."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise GpudoctorError(f"{message} (see `{self.prog} --help`)", exitcodes.USAGE)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; with `argv`, only the command it names is imported (the others are listed
    by name and help line, commands.COMMANDS), so `gpudoctor --help` imports none."""
    parser = _Parser(
        prog="gpudoctor",
        description="Why is my GPU idle? Measured, ranked diagnosis of PyTorch runs.",
        epilog="Exit codes: " + "; ".join(f"{code} {text}" for code, text in exitcodes.TABLE),
    )
    parser.add_argument("--version", action="version", version=f"gpudoctor {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log gpudoctor's own steps to stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    from gpudoctor.commands import COMMANDS

    wanted = None if argv is None else _command_named(argv)
    registered: set[str] = set()
    for name, (module_name, help_text) in COMMANDS.items():
        if name in registered:
            continue
        if argv is not None and COMMANDS.get(wanted or "", ("",))[0] != module_name:
            sub.add_parser(name, help=help_text, add_help=False)  # listed; imported only when run
            registered.add(name)
            continue
        try:
            module = importlib.import_module(f"gpudoctor.commands.{module_name}")
        except ImportError as exc:  # a command still being written must not break the others
            log.debug("command %s unavailable: %s", name, exc)
            continue
        before = set(sub.choices)
        module.register(sub)
        registered |= set(sub.choices) - before
    return parser


def _command_named(argv: Sequence[str]) -> str | None:
    """The command word of a command line: the first argument not an option (gpudoctor's
    own options take no value)."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    _closed_streams_stay_closed()
    _tolerant_streams()
    try:
        parser = build_parser(args_list)
        args = parser.parse_args(args_list)
        logging.basicConfig(
            level=logging.DEBUG if args.verbose else logging.WARNING,
            format="gpudoctor: %(levelname)s %(name)s: %(message)s",
        )
        if not getattr(args, "func", None):
            parser.print_help(sys.stderr)
            return exitcodes.USAGE
        return int(args.func(args))
    except GpudoctorError as exc:
        print(_printable(f"gpudoctor: error: {exc}"), file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print("gpudoctor: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `gpudoctor report s.json | head -1`: the reader had enough; not an error. What
        # is still buffered for stdout goes nowhere instead of failing again at exit.
        _silence_stdout()
        return exitcodes.OK
    except ModuleNotFoundError as exc:
        if (exc.name or "gpudoctor").split(".")[0] == "gpudoctor":
            return _internal_error(exc, args_list)
        # an install without gpudoctor's dependencies (pip install --no-deps): name the package
        from gpudoctor.collectors.windows import missing_dependency

        print(_printable(f"gpudoctor: error: {missing_dependency(exc, 'this command')}"), file=sys.stderr)
        return exitcodes.NOT_RUNNABLE
    except Exception as exc:  # noqa: BLE001  (a bug: one line, and the details only with -v)
        return _internal_error(exc, args_list)


def entry() -> None:
    """The `gpudoctor` script and `python -m gpudoctor`: main(), then leave at once."""
    _leave(main())


def _leave(code: int) -> None:
    """Exit without tearing the interpreter down: freeing every module and object one by one
    (numpy, matplotlib, a trace's caches) took 0.12-0.23 s after `gpudoctor analyze` had
    written everything, on the 2-core development VM. What an exit owes the world still runs:
    the atexit handlers (multiprocessing's, logging's, temporary directories') and the flush
    of stdout and stderr. With a thread still running, or a stream that cannot be flushed (a
    closed pipe), the exit is the usual one, which handles both."""
    import atexit
    import threading

    if threading.active_count() > 1:
        raise SystemExit(code)
    atexit._run_exitfuncs()
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        raise SystemExit(code) from None
    os._exit(code)


def _internal_error(exc: BaseException, args_list: list[str]) -> int:
    """A bug: one line, and the details only with -v."""
    log.debug("internal error", exc_info=True)
    print(
        _printable(f"gpudoctor: internal error: {type(exc).__name__}: {exc} (run with -v for details; "
                   "please report it)"),
        file=sys.stderr,
    )
    if "-v" in args_list or "--verbose" in args_list:
        import traceback

        traceback.print_exc()
    return exitcodes.INTERNAL


def _printable(text: str) -> str:
    """An error line may quote a file's content or name: no terminal controls from it."""
    from gpudoctor.base.text import printable

    return str(printable(text))


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def _closed_streams_stay_closed() -> None:
    """Started with stdin, stdout or stderr closed (`2>&-`): Python set that stream to None,
    and print(file=None) would write gpudoctor's messages to stdout, into the JSON a script
    reads. Messages for a closed stream go nowhere instead. The descriptor number is held by
    /dev/null, so no file gpudoctor opens later lands on it; it is not inherited, so the
    workload starts with the same closed descriptor gpudoctor had."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        try:
            held = os.open(os.devnull, os.O_RDWR)  # the lowest free number: this one
            if held != fd:
                os.close(held)
        except OSError:
            pass
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "r" if fd == 0 else "w"))  # noqa: SIM115 (for the process's life)


def _tolerant_streams() -> None:
    """Never fail on printing: a non-UTF-8 path or argument (lone surrogates after
    os.fsdecode) is shown as an escape such as \\udcff, not a UnicodeEncodeError."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            pass  # not a text file we own (None, StringIO, a detached stream)
