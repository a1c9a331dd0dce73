"""The ``helm-plan`` typer app: registers the commands and maps errors to one line.

Every failure prints exactly one line, ``error: <problem>; <fix>``, on stderr:
library errors (:class:`HelmPlanError`, exit 2), bad option values and
unknown options (exit 2), Ctrl-C (exit 130) and bugs (exit 1, traceback with
``--debug``). Library notes (:class:`HelmPlanNote` warnings) print as
``note: ...`` lines.
"""

from __future__ import annotations

import logging
import sys
import warnings
from typing import Annotated, Any

import typer
from helm_plan_cli.commands import COMMAND_MODULES
from typer import Abort
from typer.core import TyperGroup

try:  # typer >= 0.20 vendors click
    from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError
except ImportError:  # pragma: no cover - older typer on click itself
    from click.exceptions import ClickException, NoArgsIsHelpError, UsageError

from helm_plan_cli._interrupt import INTERRUPT_LINE, INTERRUPTED, SIGNALLED
from helm_plan_cli.output import emit_error, emit_line, emit_notes

from helm_plan._version import __version__
from helm_plan.errors import HelmPlanError, HelmPlanNote

_debug = {"on": False}


def set_debug(on: bool) -> None:
    """Show full tracebacks (``--debug``), set before the app parses its options."""
    _debug["on"] = on


class _DropInterruptedTrials(logging.Filter):
    """Drop optuna's warnings about a trial stopped by Ctrl-C (a traceback, then "failed").

    Our objectives never raise otherwise, so a failed trial only means an interrupt.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[0] if record.exc_info else None
        if exc is not None and issubclass(exc, KeyboardInterrupt):
            return False
        msg = record.getMessage()
        return "KeyboardInterrupt" not in msg and "failed with value None" not in msg


# getLogger makes the logger optuna will use later, so optuna need not be imported here.
logging.getLogger("optuna.study._optimize").addFilter(_DropInterruptedTrials())


def _fail(message: str, code: int) -> typer.Exit:
    emit_error(message)
    return typer.Exit(code)


def _note_printer(fallback: Any) -> Any:  # noqa: ANN401
    """A ``warnings.showwarning`` printing HelmPlanNote as ``note:`` lines, others as before."""

    def show(message: Any, category: type[Warning], *args: Any, **kw: Any) -> None:
        if issubclass(category, HelmPlanNote):
            emit_notes([str(message)])
        else:
            fallback(message, category, *args, **kw)

    return show


def _given(args: list[str], opts: list[str]) -> str | None:
    """The value the user gave option ``opts`` on the command line (last one wins)."""
    found = None
    for i, a in enumerate(args):
        for o in opts:
            if a == o and i + 1 < len(args):
                found = args[i + 1]
            elif a.startswith(f"{o}="):
                found = a[len(o) + 1 :]
    return found


def _usage_line(e: UsageError, args: list[str]) -> str:
    """A click usage error as ``<problem>; <fix>`` (no usage box), naming the bad value."""
    msg = " ".join(e.format_message().split()).rstrip(".")
    param = getattr(e, "param", None)
    value = _given(args, list(getattr(param, "opts", []) or [])) if param is not None else None
    if value is not None and repr(value) not in msg:
        msg = f"{msg} (got {value!r})"
    cmd = e.ctx.command_path if e.ctx is not None else "helm-plan"
    return f"{msg}; see `{cmd} --help` for the valid options and values"


def _untyped_flags(params: list[Any]) -> list[Any]:
    """``params`` with the type column of every flag left empty: a flag takes no value, so
    ``<bool>`` beside it would only mislead (typer shows the annotation's type)."""
    for p in params:
        if getattr(p, "is_flag", False):
            p.metavar = ""
    return params


class _Group(TyperGroup):
    """Maps library errors to one line on stderr and a non-zero exit (traceback with --debug)."""

    def get_params(self, ctx: Any) -> list[Any]:  # noqa: ANN401
        return _untyped_flags(super().get_params(ctx))

    def get_command(self, ctx: Any, cmd_name: str) -> Any:  # noqa: ANN401
        cmd = super().get_command(ctx, cmd_name)
        if cmd is not None:
            _untyped_flags(cmd.get_params(ctx))
        return cmd

    def main(self, args: Any = None, prog_name: Any = None, *a: Any, **kw: Any) -> Any:  # noqa: ANN401
        standalone = kw.pop("standalone_mode", True)
        try:
            rv = super().main(args, prog_name, *a, standalone_mode=False, **kw)
        except NoArgsIsHelpError as e:
            if not standalone:
                raise
            e.show()
            sys.exit(e.exit_code)
        except UsageError as e:
            if not standalone:
                raise
            given = list(sys.argv[1:] if args is None else args)
            emit_error(_usage_line(e, given))
            sys.exit(2)
        except ClickException as e:
            if not standalone:
                raise
            emit_error(f"{e.format_message()}; see `helm-plan --help`")
            sys.exit(e.exit_code)
        except Abort:
            if not standalone:
                raise
            emit_error(INTERRUPT_LINE.removeprefix("error: "))
            sys.exit(INTERRUPTED)
        if not standalone:
            return rv
        # With standalone_mode=False click returns an Exit's code instead of raising it.
        sys.exit(rv if isinstance(rv, int) else 0)

    def invoke(self, ctx: typer.Context):  # noqa: ANN201 - typer's signature
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("always", HelmPlanNote)
                warnings.showwarning = _note_printer(warnings.showwarning)
                return super().invoke(ctx)
        except HelmPlanError as e:
            if _debug["on"]:
                raise
            if SIGNALLED.is_set():  # a Ctrl-C that surfaced as another error is a Ctrl-C
                raise _fail(INTERRUPT_LINE.removeprefix("error: "), INTERRUPTED) from None
            # Every error line has a fix; one raised without a hint gets the help pointer.
            cmd = " ".join(x for x in (ctx.command_path, ctx.invoked_subcommand) if x)
            line = e.one_line() if e.hint else f"{e}; see `{cmd} --help`"
            raise _fail(line, e.exit_code) from e
        except KeyboardInterrupt:
            if _debug["on"]:
                raise
            raise _fail(INTERRUPT_LINE.removeprefix("error: "), INTERRUPTED) from None
        except (typer.Exit, typer.Abort, typer.TyperException, BrokenPipeError):
            raise  # a closed stdout (`| head`) is not a bug: main() ends quietly
        except Exception as e:
            if _debug["on"]:
                raise
            if SIGNALLED.is_set():
                raise _fail(INTERRUPT_LINE.removeprefix("error: "), INTERRUPTED) from None
            raise _fail(
                f"internal error {type(e).__name__}: {e}; this is a bug, "
                "rerun with --debug for the traceback and report it",
                1,
            ) from e


app = typer.Typer(
    cls=_Group,
    name="helm-plan",
    help="Trace-driven capacity planning for generative-recommender serving (EMB/KV cache split).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _version(shown: bool) -> None:
    if shown:
        emit_line(f"helm-plan {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show full tracebacks on errors.")] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="Print the version and exit.", callback=_version, is_eager=True
        ),
    ] = False,
) -> None:
    _debug["on"] = debug


for _mod in COMMAND_MODULES:
    _mod.register(app)
