"""`python -m rocescope.cli`: the command, for tests and hosts without the entry point on PATH."""

from rocescope.cli import app

app()
