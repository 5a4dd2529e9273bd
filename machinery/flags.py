"""Command-line flags from dataclasses: one pattern for every entry point (`train.py`, `sft.py`,
`eval.py`, the benchmarks).

Where it sits: an entry point declares a dataclass whose every field carries a one-line docstring;
`parse(cls, argv)` turns it into command-line flags (`--field-name`, the docstring as --help) and
back into an instance, so the dataclass is the one source of every knob, its type and its default
(CleanRL's `Args`, without a framework). A dataclass may extend several others (config.AgentConfig,
update.UpdateConfig, each algorithm's `Settings`): their fields, docstrings and checks all count.

Parsing is by the field's annotated type: `bool` accepts true/false, yes/no, on/off, 1/0 (never
"any non-empty string is True"); `X | None` also accepts `auto`, meaning None: "the model's own
default" (the tiny policy's differ from a real model's, see tiny.SETTINGS).

What a flag allows is declared beside its field: `flag(default, choices=..., at_least=...)`.
`validate` checks every field against it when a config is made (the dataclass's __post_init__, so
a config built in code is checked too); `parse` answers a bad value the argparse way, with ONE line
and exit code 2: `train.py: error: --group-size 0: must be at least 1`.

Presets (`parse(..., presets=...)`, train.py's presets/): `--preset NAME` makes a preset's values
the defaults, so a flag given on the command line still wins; `--show-preset` prints every flag's
value and where it came from (the command line, the preset and the reference's knob, or the
default), as does --help beside each flag.
"""

import argparse
import ast
import dataclasses
import inspect
import types
import typing


def flag(default, *, choices=None, at_least=None, above=None, at_most=None, items=None, check=None):
    """A config field with its `default` and what the flag allows: one of `choices`, a number
    `at_least` / `above` / `at_most` a bound, a comma-separated list of `items` (a type: int) each
    within the bounds, or whatever `check(value)` accepts (it returns what is wrong, or None).
    None (a flag's `auto`) is always allowed."""
    rule = dict(choices=choices, at_least=at_least, above=above, at_most=at_most, items=items, check=check)
    return dataclasses.field(default=default, metadata={"allowed": rule})


def problem(value, choices=None, at_least=None, above=None, at_most=None, items=None, check=None):
    """What is wrong with `value` under one field's rule (see `flag`), the end of the error line;
    None: nothing."""
    if value is None:
        return None
    if choices is not None and value not in choices:
        return "choose one of " + ", ".join(map(str, choices))
    if check is not None:
        return check(value)
    named = (("at least", at_least), ("above", above), ("at most", at_most))
    bounds = " and ".join(f"{word} {b}" for word, b in named if b is not None)
    values = [value]
    if items is not None:
        try:
            values = [items(v) for v in value.split(",")]
        except ValueError:
            values = []
        if not values or (bounds and not all(within(v, at_least, above, at_most) for v in values)):
            kind = {int: "integers", float: "numbers"}.get(items, items.__name__)
            return f"expected comma-separated {kind}" + (f", each {bounds}" if bounds else "")
    elif not within(value, at_least, above, at_most):
        return f"must be {bounds}"
    return None


def within(x, at_least=None, above=None, at_most=None) -> bool:
    return (
        (at_least is None or x >= at_least)
        and (above is None or x > above)
        and (at_most is None or x <= at_most)
    )


def validate(cfg) -> None:
    """Raise ValueError ("--flag value: what is allowed") at the first field of dataclass `cfg`
    outside what its `flag` declares."""
    for f in dataclasses.fields(cfg):
        rule = f.metadata.get("allowed")
        why = problem(getattr(cfg, f.name), **rule) if rule else None
        if why:
            raise ValueError(f"{option(f.name)} {getattr(cfg, f.name)}: {why}")


def option(name: str) -> str:
    return "--" + name.replace("_", "-")


def parse_bool(text: str) -> bool:
    t = text.strip().lower()
    if t in ("1", "true", "yes", "on"):
        return True
    if t in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, yes/no, on/off or 1/0, got {text!r}")


def field_docs(cls) -> dict[str, str]:
    """The docstring under each dataclass field (of `cls` and the dataclasses it extends)."""
    docs = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass) or klass.__module__ == "types":
            continue  # (a class dataclasses.make_dataclass built has no source; its bases do)
        body = ast.parse(inspect.getsource(klass)).body[0].body
        for a, b in zip(body, body[1:]):
            if isinstance(a, ast.AnnAssign) and isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant):
                docs[a.target.id] = b.value.value
    return docs


def _converter(tp):
    """A string -> value function for a field's annotated type."""
    args = typing.get_args(tp)
    if (typing.get_origin(tp) in (typing.Union, types.UnionType)) and type(None) in args:
        inner = _converter(next(a for a in args if a is not type(None)))
        convert = lambda text: None if text.strip().lower() in ("auto", "none") else inner(text)  # noqa: E731
        convert.__name__ = f"{inner.__name__} (or auto)"  # argparse's "invalid int (or auto) value: 'x'"
        return convert
    return parse_bool if tp is bool else tp


class Parser(argparse.ArgumentParser):
    """argparse, answering bad input with one line (no usage block, no traceback): what was
    wrong and what is allowed; exit code 2, as argparse's."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (--help lists every flag)\n")


def parse(cls, argv=None, description: str = "", presets: dict | None = None):
    """Flags from the fields of dataclass `cls` -> an instance of `cls`, checked (`validate`).
    `presets`: name -> an object with `flags` (field -> an object with `value` and `source`) and
    `notes` (lines): adds --preset and --show-preset (this module's docstring)."""
    preset = chosen_preset(argv, description, presets)
    p = parser(cls, description, preset, presets)
    args = p.parse_args(argv)
    show = vars(args).pop("show_preset", False)
    vars(args).pop("preset", None)
    try:
        cfg = cls(**vars(args))
    except ValueError as e:
        p.error(str(e))
    if show:
        given = vars(parser(cls, description, preset, presets, argparse.SUPPRESS).parse_args(argv))
        print("\n".join(resolved(cls, args, given, preset)))
        p.exit(0)
    return cfg


def chosen_preset(argv, description: str, presets: dict | None):
    """The preset `--preset NAME` names in `argv` (None: none given, or no presets offered)."""
    if presets is None:
        return None
    p = Parser(description=description, add_help=False)
    p.add_argument("--preset", choices=list(presets))
    name = p.parse_known_args(argv)[0].preset
    return presets[name] if name else None


def parser(cls, description: str, preset=None, presets: dict | None = None, default=None) -> Parser:
    """The flags of `cls`, their defaults the preset's values where it sets them; `default`
    (argparse.SUPPRESS) instead leaves out every flag not given, to tell what the command line set."""
    p = Parser(description=description)
    docs, hints = field_docs(cls), typing.get_type_hints(cls)
    chosen = preset.flags if preset else {}
    for f in dataclasses.fields(cls):
        value = chosen[f.name].value if f.name in chosen else f.default
        where = f"preset: {chosen[f.name].source}" if f.name in chosen else "default"
        shown = "auto" if value is None else value
        p.add_argument(
            option(f.name),
            type=_converter(hints[f.name]),
            default=value if default is None else default,
            help=f"{docs.get(f.name, '')} ({where}: {shown})",
        )
    if presets is not None:
        names = ", ".join(presets)
        p.add_argument(
            "--preset", choices=list(presets), default=default, help=f"a reference run (presets/): {names}"
        )
        show = "print every flag's value and where it came from, then exit"
        p.add_argument("--show-preset", action="store_true", default=default or False, help=show)
    return p


def resolved(cls, args, given: dict, preset) -> list[str]:
    """--show-preset's lines: each flag's value and its source, the flags that differ from the
    dataclass's defaults first, then the preset's notes and the same run without --preset."""
    chosen = preset.flags if preset else {}
    rows, rest = [], []
    for f in dataclasses.fields(cls):
        value = getattr(args, f.name)
        shown = "auto" if value is None else value
        if f.name in given:
            where = "command line" + (f" (preset: {chosen[f.name].value})" if f.name in chosen else "")
        elif f.name in chosen:
            where = "preset: " + chosen[f.name].source
        else:
            rest.append(f"{option(f.name)} {shown}")
            continue
        rows.append((f"{option(f.name)} {shown}", where))
    width = max((len(a) for a, _ in rows), default=0)
    head = [f"preset {preset.name}:" if preset else "no preset:"]
    lines = (
        head
        + [f"  {a:<{width}}  {b}" for a, b in rows]
        + ["every other flag at its default: " + ", ".join(rest)]
    )
    explicit = " ".join(f"{a}" for a, _ in rows)
    return lines + (preset.notes if preset else []) + [f"the same run without --preset: {explicit}"]
