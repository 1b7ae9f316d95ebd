"""The field table of a training command: every option of its real parser (`args.make_parser`) as plain data, and
`accelerate launch`'s options, so that `quick_checks` can read a command line with `argparse` alone.

Rendering it imports TRL; reading it does not. It is stored beside the help (`help_cache.stored_field_table`),
shipped for the versions the package was built with, and kept in the user's cache for others; a test renders it
live and compares.
"""

import argparse
import json


def render_field_table(command: str) -> dict | None:
    """The table, or `None` when the parser has an option of a kind the table cannot describe (a later TRL or
    transformers release could add one): the command then runs without quick checks, as before."""
    from .args import VARIANTS, field_option_names, make_parser
    from .launch import accelerate_launch_options

    parser = make_parser(VARIANTS[command])
    actions = [_action_entry(action) for action in parser._actions]
    if None in actions:  # an option argparse alone cannot read as the real parser does: no quick checks
        return None
    return {
        "config_class": VARIANTS[command].config_class.__name__,
        "allow_abbrev": parser.allow_abbrev,
        "actions": actions,
        "field_options": field_option_names(parser),
        "unsettable": parser.optional_field_dests,
        "launch_options": accelerate_launch_options(),
    }


def _action_entry(action: argparse.Action) -> dict:
    entry = {"options": list(action.option_strings), "dest": action.dest}
    for kind, action_class in (
        ("help", argparse._HelpAction),
        ("store_true", argparse._StoreTrueAction),
        ("store_false", argparse._StoreFalseAction),
    ):
        if isinstance(action, action_class):
            return {**entry, "kind": kind}
    if type(action) is not argparse._StoreAction:
        return None
    stored = {
        **entry,
        "kind": "store",
        "nargs": action.nargs,
        "const": action.const,
        "type": _type_name(action.type),
        "none_reads_as_none": _reads_none_as_none(action.type),
        "choices": None if action.choices is None else list(action.choices),
    }
    try:  # a constant or choice that JSON cannot hold would not read back as itself
        return stored if json.loads(json.dumps(stored)) == stored else None
    except (TypeError, ValueError):
        return None


# What each plain type reads "7" as, to tell TRL's wrapped readers (same `__name__`) from other functions.
PLAIN_READINGS = {"int": 7, "float": 7.0, "str": "7"}


def _type_name(value_type) -> str:
    """How `quick_checks` reads the option's values: int, float, str, bool, or "other" (left to the full parse).
    Judged by what the parser's type function does, wherever it is defined (TRL keeps its own copies of
    transformers' readers and wraps the type of `T | None` fields so that "none" reads as None)."""
    if value_type is None:
        return "str"
    name = getattr(value_type, "__name__", "")
    try:
        if name in PLAIN_READINGS and value_type("7") == PLAIN_READINGS[name]:
            return name if type(value_type("7")) is type(PLAIN_READINGS[name]) else "other"
        if _reads_as_bool(value_type):
            return "bool"
    except Exception:
        pass
    return "other"


def _reads_none_as_none(value_type) -> bool:
    try:
        return value_type is not None and value_type("none") is None and value_type("NULL") is None
    except Exception:
        return False


def _reads_as_bool(value_type) -> bool:
    """Whether a parser's type function is the bool reading of transformers' parser (TRL keeps its own copy), which
    `quick_checks.string_to_bool` repeats: judged by what it does, wherever it is defined."""
    try:
        value_type("maybe")
    except argparse.ArgumentTypeError as error:
        return value_type("yes") is True and value_type("0") is False and str(error).startswith("Truthy value")
    except Exception:
        return False
    return False
