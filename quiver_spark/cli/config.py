"""``quiver config PATH [set KEY=VALUE ...]``: show or change the store's recorded policy.

The policy (ARCHITECTURE.md §6.6) holds ``retention.size_cap``,
``retention.size_cap_policy``, ``retention.max_age``,
``retention.steady_state_headroom`` and ``subscriber.expire_after``. It is recorded
when the store is created and applies to every writer, reader and command; a
process whose explicit option contradicts it refuses to start. ``set`` changes it
(``none`` clears an optional value); running processes apply the change at their next
retention pass. ``--generation N`` makes the change conditional on the generation
last shown (it fails if someone changed the policy since).

JSON schema (``--json``; ``"schema": "quiver.config/1"``)::

    {
      "schema": "quiver.config/1", "path": str, "generation": int, "updated_ns": int,
      "policy": {option: str},             # as a person writes it: "1GB", "none", "3d"
      "layout": {"segments": str, "wal": str},
      "changed": [option]                  # with `set`: what this call changed
    }
"""

from __future__ import annotations

import inspect
from typing import Any

import click

from ..errors import ConfigError, QuiverError
from ..options import canonical_option, store_config_from_options
from ..policy import POLICY_OPTIONS, StorePolicy, policy_of
from ..store import QuiverStore
from .common import CliError, StoreArgs, emit_json, render_table, store_arguments, with_store

SCHEMA = "quiver.config/1"


def _parse_changes(pairs: tuple[str, ...]) -> dict[str, Any]:
    if not pairs:
        raise CliError("set needs at least one KEY=VALUE, e.g. retention.size_cap=2GB")
    raw: dict[str, str] = {}  # as given (an alias keeps its own value rules)
    names: list[str] = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        option = canonical_option(key)
        if option not in POLICY_OPTIONS:
            option = None
        if not sep or option is None:
            raise CliError(
                f"invalid policy change {pair!r}; allowed: KEY=VALUE with KEY one of "
                + ", ".join(POLICY_OPTIONS)
            )
        raw[key.strip()] = value.strip()
        names.append(option)
    try:
        given = {k: ("" if v.lower() == "none" else v) for k, v in raw.items()}
        parsed = policy_of(store_config_from_options(given))
    except ConfigError as e:
        raise CliError(str(e)) from e
    return {option: parsed.value(option) for option in names}


def _document(store: QuiverStore, policy: StorePolicy, changed: list[str]) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "path": store.root,
        "generation": policy.generation,
        "updated_ns": policy.updated_ns,
        "policy": {o: policy.shown(o) for o in POLICY_OPTIONS},
        "layout": {"segments": store.segments_url, "wal": store.wal_root},
        "changed": changed,
    }


@click.command("config")
@store_arguments
@click.argument("action", required=False, type=click.Choice(["show", "set"]), default="show")
@click.argument("changes", nargs=-1, metavar="[KEY=VALUE]...")
@click.option(
    "--generation",
    type=int,
    default=None,
    help="With set: apply only if the policy is still at this generation.",
)
def config(args: StoreArgs, action: str, changes: tuple[str, ...], generation: int | None) -> None:
    """Show the store's policy, or change it with: set KEY=VALUE ...

    \b
    quiver config PATH [show]
    quiver config PATH set KEY=VALUE ... [--generation N]

    KEY is a policy option (listed below; `none` clears an optional one). Writers
    and readers apply a change at their next retention pass.
    """
    if action == "show" and changes:
        raise CliError(f"show takes no KEY=VALUE; did you mean: quiver config {args.path} set ...")
    parsed = _parse_changes(changes) if action == "set" else {}

    def run(store: QuiverStore) -> dict[str, Any]:
        if action == "set":
            try:
                policy = store.set_policy(parsed, expected_generation=generation)
            except ConfigError as e:
                raise CliError(str(e), 1) from e
            except QuiverError as e:
                raise CliError(str(e), 1) from e
            return _document(store, policy, sorted(parsed))
        return _document(store, store.policy, [])

    doc = with_store(args, run)
    if args.as_json:
        emit_json(doc)
        return
    rows = [[o, v] for o, v in doc["policy"].items()]
    click.echo(f"Policy of {doc['path']} (generation {doc['generation']})")
    click.echo(render_table(["option", "value"], rows))
    click.echo(f"segments: {doc['layout']['segments']}")
    click.echo(f"wal:      {doc['layout']['wal']}")
    if doc["changed"]:
        click.echo("changed: " + ", ".join(doc["changed"]))


config.help = (
    inspect.cleandoc(config.help or "")
    + "\n\n\b\nPolicy options:\n"
    + "\n".join(f"  {o}" for o in POLICY_OPTIONS)
)
