"""The ``helm-plan`` command: registers the commands and maps errors to one line."""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from helm_plan_cli.commands import COMMAND_MODULES
from typer.core import TyperGroup

from helm_plan.errors import HelmPlanError

_debug = {"on": False}


def _fail(message: str, code: int) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


class _Group(TyperGroup):
    """Maps library errors to one line on stderr and a non-zero exit (traceback with --debug)."""

    def invoke(self, ctx: typer.Context):  # noqa: ANN201 - typer's signature
        try:
            return super().invoke(ctx)
        except HelmPlanError as e:
            if _debug["on"]:
                raise
            raise _fail(e.one_line(), e.exit_code) from e
        except KeyboardInterrupt:
            if _debug["on"]:
                raise
            raise _fail("interrupted; finished outputs are kept, rerun to resume", 130) from None
        except (typer.Exit, typer.Abort, typer.TyperException):
            raise
        except Exception as e:
            if _debug["on"]:
                raise
            raise _fail(
                f"internal error {type(e).__name__}: {e} (a bug; rerun with --debug for the traceback)",
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


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show full tracebacks on errors.")] = False,
) -> None:
    _debug["on"] = debug


for _mod in COMMAND_MODULES:
    _mod.register(app)


def main() -> None:
    """Console-script entry point."""
    _debug["on"] = "--debug" in sys.argv
    app(prog_name="helm-plan")


if __name__ == "__main__":
    main()
