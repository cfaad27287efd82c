"""The `bunshin` command line."""
import typer

app = typer.Typer(no_args_is_help=True)
