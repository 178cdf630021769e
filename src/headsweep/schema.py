"""What a setting may hold: its type and range or choices, declared once per setting in a small table next to
the constructor that takes it (model.transformer.MODEL_SETTINGS, training.module.MODULE_SETTINGS, ...;
training.schema gathers them). Plain Python, so that model code can declare its own without Hydra.

`Setting.problem(value)` says what is wrong with a value as one phrase ("an integer in [1, 16384]"), None if
nothing; training.schema turns it into the one-line ConfigError that names the key."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Setting:
    kind: str  # int, float, bool, str, choice, list, dict, either (one of `options`)
    lo: float | None = None  # bounds of int and float (and of list items)
    hi: float | None = None
    lo_open: bool = False  # (lo, ...] rather than [lo, ...]
    hi_open: bool = False
    choices: tuple = ()  # choice: the values allowed
    null: bool = False  # null (None) allowed too
    specials: tuple = ()  # other values allowed besides the range, e.g. -1 = no limit, "auto"
    item: Setting | None = None  # list: what each item must be
    length: int | None = None  # list: exactly this many items
    pattern: str | None = None  # str: a regular expression the whole text must match
    pattern_text: str = ""  # str: how the pattern reads in a message
    options: tuple[Setting, ...] = ()  # either: the settings a value may fit
    fix: str = ""  # what to do, in the message; empty: the generic advice

    def allowed(self) -> str:
        """What the setting takes, as a phrase: "an integer in [1, 16384] or null"."""
        if self.kind == "int":
            text = f"an integer {self._range()}"
        elif self.kind == "float":
            text = f"a number {self._range()}"
        elif self.kind == "bool":
            text = "true or false"
        elif self.kind == "choice":
            text = f"one of {', '.join(map(str, self.choices))}"
        elif self.kind == "str":
            text = self.pattern_text or "a text"
        elif self.kind == "list":
            n = f"{self.length} " if self.length else ""
            text = f"a list of {n}items, each {self.item.allowed()}" if self.item else "a list"
        elif self.kind == "either":
            text = " or ".join(o.allowed() for o in self.options)
        else:
            text = "a mapping {key: value}"
        extra = [_show(s) for s in self.specials] + (["null"] if self.null else [])
        return f"{text} or {' or '.join(extra)}" if extra else text

    def _range(self) -> str:
        if self.lo is not None and self.hi is not None:
            return f"in {'(' if self.lo_open else '['}{_num(self.lo)}, {_num(self.hi)}{')' if self.hi_open else ']'}"
        if self.lo is not None:
            return f"{'>' if self.lo_open else '>='} {_num(self.lo)}"
        if self.hi is not None:
            return f"{'<' if self.hi_open else '<='} {_num(self.hi)}"
        return "(finite)"

    def type_ok(self, value) -> bool:
        """Of the right type (a number where a number goes, ...), whatever its range."""
        if value is None and self.null or any(_same(value, s) for s in self.specials):
            return True
        if self.kind == "int":
            return isinstance(value, int) and not isinstance(value, bool)
        if self.kind == "float":
            return isinstance(value, (int, float)) and not isinstance(value, bool)
        if self.kind == "bool":
            return isinstance(value, bool)
        if self.kind in ("choice", "str"):
            return isinstance(value, str)
        if self.kind == "list":
            return isinstance(value, list)
        if self.kind == "either":
            return any(o.type_ok(value) for o in self.options)
        return isinstance(value, dict)

    def in_range(self, value) -> bool:
        """Within the range or choices (for a value of the right type)."""
        if value is None and self.null or any(_same(value, s) for s in self.specials):
            return True
        if self.kind in ("int", "float"):
            return _within(value, self)
        if self.kind == "choice":
            return value in self.choices
        if self.kind == "str":
            return self.pattern is None or re.fullmatch(self.pattern, value) is not None
        if self.kind == "list":
            return (self.length is None or len(value) == self.length) and all(
                self.item is None or self.item.type_ok(v) and self.item.in_range(v) for v in value
            )
        if self.kind == "either":
            return any(o.type_ok(value) and o.in_range(value) for o in self.options)
        return True

    def problem(self, value) -> str | None:
        """None if `value` fits; else what the setting takes."""
        return None if self.type_ok(value) and self.in_range(value) else self.allowed()


def _within(value, s: Setting) -> bool:
    if not math.isfinite(value):
        return False
    if s.lo is not None and (value <= s.lo if s.lo_open else value < s.lo):
        return False
    return s.hi is None or (value < s.hi if s.hi_open else value <= s.hi)


def _same(value, special) -> bool:  # True == 1 in Python: a special -1 or "auto" matches its own type only
    return type(value) is type(special) and value == special


def _num(x: float) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def _show(value) -> str:
    return "null" if value is None else repr(value) if isinstance(value, str) else str(value)


# The plain spellings of the tables.
def integer(lo: int | None = None, hi: int | None = None, **kw) -> Setting:
    return Setting("int", lo, hi, **kw)


def number(lo: float | None = None, hi: float | None = None, **kw) -> Setting:
    return Setting("float", lo, hi, **kw)


def share(**kw) -> Setting:
    """A fraction in [0, 1)."""
    return Setting("float", 0.0, 1.0, hi_open=True, **kw)


def choice(*options: str, **kw) -> Setting:
    return Setting("choice", choices=tuple(options), **kw)


def flag(**kw) -> Setting:
    return Setting("bool", **kw)


def text(**kw) -> Setting:
    return Setting("str", **kw)


def items(item: Setting | None = None, **kw) -> Setting:
    return Setting("list", item=item, **kw)


def mapping(**kw) -> Setting:
    return Setting("dict", **kw)


def either(*options: Setting, **kw) -> Setting:
    return Setting("either", options=options, **kw)


def nullable(s: Setting) -> Setting:
    return replace(s, null=True)
