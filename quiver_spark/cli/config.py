"""``quiver config PATH [show | set KEY=VALUE ... | repair ...]``: the store's recorded policy.

The policy (ARCHITECTURE.md §7.2) holds ``retention.size_cap``,
``retention.size_cap_policy``, ``retention.max_age``,
``retention.steady_state_headroom`` and ``subscriber.expire_after``. It is recorded
when the store is created and applies to every writer, reader and command; a
process whose explicit option contradicts it refuses to start. ``set`` changes it
(``none`` clears an optional value); running processes apply the change at their next
retention pass. ``--generation N`` makes the change conditional on the generation
last shown (it fails if someone changed the policy since).

``repair`` rewrites a POLICY that cannot be read (a failed checksum, or missing while
its copy ``POLICY.copy`` exists): ``--from-last-good`` restores the copy, the last
policy written (KEY=VALUE pairs given too change it on top); KEY=VALUE pairs alone
start from the defaults. Until then every process applies the most conservative
policy, and ``show`` says the file is damaged (``"damaged"`` in the JSON).

JSON schema (``--json``; ``"schema": "quiver.config/1"``)::

    {
      "schema": "quiver.config/1", "path": str, "generation": int, "updated_ns": int,
      "policy": {option: str},             # as a person writes it: "1GB", "none", "3d"
      "layout": {"segments": str, "wal": str},
      "changed": [option],                 # with `set`/`repair`: what this call changed
      "repaired": str | null,              # with `repair`: the file rewritten
      "damaged": str | null                # why POLICY cannot be read (the policy shown is
                                           # then the conservative one, generation 0)
    }
"""

from __future__ import annotations

import inspect
from typing import Any

import click

from ..errors import CliError, ConfigError, QuiverError
from ..options import (
    canonical_option,
    did_you_mean,
    store_config_from_options,
)
from ..policy import POLICY_OPTIONS, StorePolicy, policy_of, repair_policy
from ..store import QuiverStore
from .common import StoreArgs, emit_json, render_table, store_arguments, with_store

SCHEMA = "quiver.config/1"
LOCATIONS = ("segment.path", "wal.path")


def _not_policy(key: str, option: str | None) -> str:
    """Why ``key`` cannot be changed here, one line."""
    allowed = "policy options: " + ", ".join(POLICY_OPTIONS)
    if option in LOCATIONS:
        return (
            f"{key} is a location, not policy: it is recorded in STORE when the store is "
            f"created and never changes; {allowed}"
        )
    if option is not None:
        return f"{key} is a writer option, not policy: pass it to the sink/engine; {allowed}"
    return f"unknown policy option {key!r}{_near(key)}; {allowed}"


def _near(key: str) -> str:
    """`` (did you mean 'x'?)`` for a near miss or a bare tail (``size_cap``)."""
    tail = _tail(key)
    if tail is not None:
        return f" (did you mean {tail!r}?)"
    return did_you_mean(key.strip(), POLICY_OPTIONS)


def _parse_changes(pairs: tuple[str, ...], action: str) -> dict[str, Any]:
    """Policy changes from ``KEY=VALUE`` arguments; each mistake is one CliError line."""
    raw: dict[str, str] = {}  # as given
    names: list[str] = []
    for i, pair in enumerate(pairs):
        key, sep, value = pair.partition("=")
        if not sep:
            got = pairs[i : i + 2] if i + 1 < len(pairs) and "=" not in pairs[i + 1] else (pair,)
            option = canonical_option(key) or _tail(key)
            hint = f" (did you mean {option}={got[1]}?)" if option and len(got) > 1 else ""
            raise CliError(
                f"expected KEY=VALUE, got {' '.join(repr(g) for g in got)}{hint}; "
                f"e.g. quiver config PATH {action} retention.size_cap=2GB"
            )
        option = canonical_option(key)
        if option is None or option not in POLICY_OPTIONS:
            raise CliError(_not_policy(key.strip(), option))
        raw[key.strip()] = value.strip()
        names.append(option)
    try:
        given = {k: ("" if v.lower() == "none" else v) for k, v in raw.items()}
        parsed = policy_of(store_config_from_options(given))
    except ConfigError as e:
        raise CliError(str(e)) from e
    return {option: parsed.value(option) for option in names}


def _tail(key: str) -> str | None:
    """The policy option whose name after the dot is ``key`` (``size_cap``)."""
    k = key.strip().lower()
    return next((o for o in POLICY_OPTIONS if o.split(".", 1)[1] == k), None)


def _document(store: QuiverStore, policy: StorePolicy, changed: list[str]) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "path": store.root,
        "generation": policy.generation,
        "updated_ns": policy.updated_ns,
        "policy": {o: policy.shown(o) for o in POLICY_OPTIONS},
        "layout": {"segments": store.segments_url, "wal": store.wal_root},
        "changed": changed,
        "damaged": policy.damaged,
    }


@click.command("config")
@store_arguments
@click.argument(
    "action", required=False, type=click.Choice(["show", "set", "repair"]), default="show"
)
@click.argument("changes", nargs=-1, metavar="[KEY=VALUE]...")
@click.option(
    "--generation",
    type=int,
    default=None,
    help="With set: apply only if the policy is still at this generation.",
)
@click.option(
    "--from-last-good",
    "from_last_good",
    is_flag=True,
    help="With repair: restore POLICY from its copy, the last policy written.",
)
def config(
    args: StoreArgs,
    action: str,
    changes: tuple[str, ...],
    generation: int | None,
    from_last_good: bool,
) -> None:
    """Show the store's policy, change it with: set KEY=VALUE ..., or repair it.

    \b
    quiver config PATH [show]
    quiver config PATH set KEY=VALUE ... [--generation N]
    quiver config PATH repair [--from-last-good] [KEY=VALUE ...]

    KEY is a policy option (listed below; `none` clears an optional one). Writers
    and readers apply a change at their next retention pass. repair rewrites a
    POLICY that cannot be read, from its copy (--from-last-good) or from the
    defaults and the values given; with POLICY readable, bare repair rewrites a
    damaged or missing copy (POLICY.copy).
    """
    if action == "show" and changes:
        raise CliError(f"show takes no KEY=VALUE; did you mean: quiver config {args.path} set ...")
    if from_last_good and action != "repair":
        raise CliError(f"--from-last-good goes with repair: quiver config {args.path} repair ...")
    if generation is not None and action != "set":
        raise CliError(f"--generation goes with set: quiver config {args.path} set ...")
    if action == "set" and not changes:
        raise CliError("set needs at least one KEY=VALUE, e.g. retention.size_cap=2GB")
    parsed = _parse_changes(changes, action) if action != "show" else {}

    def run(store: QuiverStore) -> dict[str, Any]:
        if action == "show":
            return _document(store, store.policy, [])
        repaired = None
        try:
            if action == "set":
                policy = store.set_policy(parsed, expected_generation=generation)
            else:
                policy, repaired = repair_policy(
                    store.objects, parsed, from_last_good=from_last_good
                )
        except QuiverError as e:
            raise CliError(str(e), 1) from e
        return {**_document(store, policy, sorted(parsed)), "repaired": repaired}

    doc = with_store(args, run)
    if args.as_json:
        emit_json(doc)
        return
    rows = [[o, v] for o, v in doc["policy"].items()]
    if doc["damaged"]:
        click.echo(f"Policy of {doc['path']}: DAMAGED, applying the most conservative policy")
    else:
        click.echo(f"Policy of {doc['path']} (generation {doc['generation']})")
    click.echo(render_table(["option", "value"], rows))
    click.echo(f"segments: {doc['layout']['segments']}")
    click.echo(f"wal:      {doc['layout']['wal']}")
    if doc["changed"]:
        click.echo("changed: " + ", ".join(doc["changed"]))
    if doc.get("repaired"):
        click.echo(f"repaired: {doc['repaired']} (generation {doc['generation']})")


config.help = (
    inspect.cleandoc(config.help or "")
    + "\n\n\b\nPolicy options:\n"
    + "\n".join(f"  {o}" for o in POLICY_OPTIONS)
)
