"""What every listing command shares: `-o table|json` (JSON rows for scripts), tables that never cut a name,
and the names shells complete (jobs, tuning jobs, pools, read from the store as the user types)."""

from __future__ import annotations

import json

import click

OUTPUTS = ("table", "json")


def _json_alias(ctx: click.Context, param, value: bool) -> None:
    if value:
        ctx.meta["shipyard_output"] = "json"


def output_option(command):
    """`-o/--output table|json` on a listing; `--json`, the older spelling, still works (hidden)."""
    command = click.option("-o", "--output", type=click.Choice(OUTPUTS), default="table", show_default=True,
                           callback=lambda ctx, param, value: ctx.meta.get("shipyard_output", value),
                           help="json: every row's fields, for scripts.")(command)
    return click.option("--json", is_flag=True, hidden=True, expose_value=False, is_eager=True,
                        callback=_json_alias)(command)


def json_default(value):
    if hasattr(value, "isoformat"):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def echo_json(value) -> None:
    click.echo(json.dumps(value, indent=2, default=json_default))


def table_console():
    from rich.console import Console

    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=max(console.width, 160))  # piped: no wrapped rows
    return console


def table(*columns: str, wrap: tuple[str, ...] = ()):
    """A borderless table; only the columns in `wrap` (free text) may wrap, names never do."""
    from rich.table import Table

    made = Table(box=None, header_style="bold", pad_edge=False)
    for column in columns:
        made.add_column(column, no_wrap=column not in wrap)
    return made


def fitting(cells: dict[str, list[str]], width: int, drop: tuple[str, ...]) -> list[str]:
    """The columns that fit the terminal: names are never cut nor wrapped (they are copied), so on a narrow
    one the columns in `drop` go, first to last, until the rest fits (`-o json` has them all)."""
    def needed(columns):
        return sum(max(len(c), *(len(v) for v in cells[c])) for c in columns) + 2 * (len(columns) - 1)

    shown = list(cells)
    for column in drop:
        if needed(shown) <= width:
            break
        shown.remove(column)
    return shown


# -- shell completion: what is typed so far, completed from the store ----------------------------------
def _names(listed, incomplete: str) -> list:
    from click.shell_completion import CompletionItem

    from shipyard.settings import shipyard_home

    if not (shipyard_home() / "shipyard.db").exists():
        return []  # completing never creates a store
    try:
        return [CompletionItem(name) for name in listed() if name.startswith(incomplete)]
    except Exception:  # a missing or locked store completes nothing rather than printing a traceback
        return []


def complete_jobs(ctx, param, incomplete: str) -> list:
    from shipyard.store import Store

    return _names(lambda: [r.name for r in Store().list_jobs(name_contains=incomplete or None)], incomplete)


def complete_tuning_jobs(ctx, param, incomplete: str) -> list:
    from shipyard.store import Store
    from shipyard.store.tuning import TuningStore

    return _names(lambda: [r.name for r in TuningStore(Store()).list()], incomplete)


def complete_pools(ctx, param, incomplete: str) -> list:
    from shipyard.store import Store
    from shipyard.store.pools import PoolStore

    return _names(lambda: [p.name for p in PoolStore(Store()).list(include_terminated=False)], incomplete)
