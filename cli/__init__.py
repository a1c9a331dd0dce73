"""The thin typer app behind the ``helm-plan`` entry point (installed as ``helm_plan_cli``)."""
