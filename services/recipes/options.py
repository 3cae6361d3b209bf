"""Command-line options generated from pydantic models, so a setting is declared once.

A study script (a probe, a signal study, a data check beside its recipe) takes some of its
recipe's settings: it names the config model's fields, and each becomes an option with the
field's type, default and description, never written again:

    parser = argparse.ArgumentParser(description=__doc__)
    add_model_options(parser, When2AskConfig, ["planner_noise", "planner_noise_mode", "seed"])
    parser.add_argument("--steps", type=int, default=30_000, help="mediator steps per task")
    args = parser.parse_args()
    config = model_from_options(When2AskConfig, args)   # validated: a bad value names its key

`--planner-noise 0.2` sets `planner_noise`; a field of a settings group is named dotted
(`ppo.num_envs`) and its option by its own name (`--num-envs`); a list field takes several values
(`--envs KeyInBox ColoredDoorKey`), a bool field `--flag/--no-flag`, an optional field the
word `none`; anything else the model parses from the text (numbers, literals). A study may
give other defaults for its own purpose (`defaults={"eval_episodes": 20}`): the help says so.
"""

from __future__ import annotations

import argparse
import json
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from llmrl.common.config import deep_merged, nested
from llmrl.common.names import local_model_paths_allowed
from llmrl.recipes.config import ConfigError

# the attribute of the parsed arguments holding which fields came from this model
_FIELDS_ATTR = "_model_option_fields"


def _is_list(annotation: Any) -> bool:
    origins = {typing.get_origin(arg) for arg in (*typing.get_args(annotation), annotation)}
    return bool(origins & {list, tuple, set})


def _is_bool(annotation: Any) -> bool:
    return annotation is bool or (
        set(typing.get_args(annotation)) <= {bool, type(None)}
        and (bool in typing.get_args(annotation))
    )


def _parse_text(text: str) -> Any:
    """A value as the user typed it: JSON where it parses (numbers, lists), else text."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return text if value is None else value  # "null" is a word here; `none` below


def _optional_text(text: str) -> Any:
    """As `_parse_text`, and the word `none` for a field that may be null."""
    return None if text.lower() in ("none", "null") else _parse_text(text)


def _allows_none(annotation: Any) -> bool:
    return annotation is None or type(None) in typing.get_args(annotation)


def _field(model: type[BaseModel], name: str) -> Any:
    """The field `name` of `model`, or of its group for a dotted name (`ppo.num_envs`)."""
    *groups, leaf = name.split(".")
    for group in groups:
        annotation = model.model_fields[group].annotation if group in model.model_fields else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            raise ValueError(f"{model.__name__} has no settings group {group!r}")
        model = annotation
    if leaf not in model.model_fields:
        raise ValueError(f"{model.__name__} has no field {leaf!r}")
    return model.model_fields[leaf]


def _dest(name: str) -> str:
    """Where a field's option lands in the parsed arguments: its own name (`num_envs` for
    `ppo.num_envs`), so a script reads `args.num_envs` whichever group holds it."""
    return name.rpartition(".")[2]


def _flag(name: str) -> str:
    return "--" + _dest(name).replace("_", "-")


def add_model_options(
    parser: argparse.ArgumentParser,
    model: type[BaseModel],
    fields: Sequence[str],
    defaults: Mapping[str, Any] | None = None,
) -> None:
    """One `--field-name` option per field of `model` named in `fields`."""
    defaults = dict(defaults or {})
    infos = {name: _field(model, name) for name in [*fields, *defaults]}
    dests = [_dest(name) for name in fields]
    if len(set(dests)) < len(dests):
        raise ValueError(f"{model.__name__}: options {fields} would share a name")
    group = parser.add_argument_group(f"settings ({model.__name__}'s keys)")
    for name in fields:
        info = infos[name]
        default = (
            defaults[name] if name in defaults else info.get_default(call_default_factory=True)
        )
        note = " (this script's default; the recipe's is "
        note += f"{info.get_default(call_default_factory=True)!r})" if name in defaults else ""
        help_text = (info.description or name).rstrip(".") + f". Default: {default!r}"
        help_text += note if name in defaults else ""
        flag = _flag(name)
        if _is_bool(info.annotation):
            group.add_argument(
                flag,
                dest=_dest(name),
                action=argparse.BooleanOptionalAction,
                default=default,
                help=help_text,
            )
        elif _is_list(info.annotation):
            group.add_argument(
                flag, dest=_dest(name), nargs="+", type=_parse_text, default=default, help=help_text
            )
        else:
            parse = _optional_text if _allows_none(info.annotation) else _parse_text
            group.add_argument(flag, dest=_dest(name), type=parse, default=default, help=help_text)
    known = getattr(parser, _FIELDS_ATTR, {})
    known[model.__name__] = [*known.get(model.__name__, []), *fields]
    setattr(parser, _FIELDS_ATTR, known)
    parser.set_defaults(**{_FIELDS_ATTR: known})


def model_from_options(model: type[BaseModel], args: argparse.Namespace, **extra: Any) -> Any:
    """The model built from the options `add_model_options` made for it (plus `extra` field
    values); ConfigError naming the option and what is allowed otherwise."""
    names = getattr(args, _FIELDS_ATTR, {}).get(model.__name__, [])
    values: dict[str, Any] = {}
    for name, value in [*((name, getattr(args, _dest(name))) for name in names), *extra.items()]:
        values = deep_merged(values, nested(name, value))  # a group's key: ppo.num_envs
    try:
        with local_model_paths_allowed():  # a study loads the model its user names here
            return model(**values)
    except ValidationError as exc:
        problems = [
            f"{_flag('.'.join(map(str, err['loc'])))}: {err['msg']}" if err["loc"] else err["msg"]
            for err in exc.errors(include_url=False)
        ]
        raise ConfigError("; ".join(problems), exc.errors()) from None


def parse_model_options(
    parser: argparse.ArgumentParser,
    model: type[BaseModel],
    argv: Sequence[str] | None = None,
    **extra: Any,
) -> tuple[argparse.Namespace, Any]:
    """Parse the command line and build `model` from its generated options (plus `extra`);
    a bad value exits as argparse does (status 2), naming the option and what it takes."""
    args = parser.parse_args(argv)
    try:
        return args, model_from_options(model, args, **extra)
    except ConfigError as exc:
        parser.error(str(exc))


def check_each_value(
    model: type[BaseModel], args: argparse.Namespace, key: str, value: Any, **extra: Any
) -> None:
    """One value of a study's own list of a key's values (`--<key>s a b c`, e.g. several
    state weights to compare), checked by building `model` with it as `key` beside the other
    options; ConfigError naming that option and the value otherwise."""
    try:
        model_from_options(model, args, **extra, **{key: value})
    except ConfigError as exc:
        reasons = "; ".join(str(error["msg"]) for error in exc.errors)
        shown = f"{value:g}" if isinstance(value, int | float) else str(value)  # not only numbers
        raise ConfigError(f"--{key.replace('_', '-')}s {shown}: {reasons}", exc.errors) from None
