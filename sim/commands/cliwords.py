"""The command line's own words for what click refuses: a bad option value, an unknown
option or command, a missing argument.

click words these its own way (``Invalid value for '--jobs' / '-j': 'x' is not a valid
integer range.``); the project's errors name the option and the value first, then what is
wrong (``--set steps=abc: not a valid int``). The option types here are click's, each
refusing a value in those words; :func:`said` words every other usage error click raises.

Examples
--------
>>> import click
>>> @click.command()
... @click.option("--jobs", "-j", type=AtLeast(1))
... def cmd(jobs):
...     pass
>>> for args in (["--jobs", "0"], ["--jobs", "x"], ["--job", "2"], ["-j"], ["extra"]):
...     try:
...         cmd.main(args, prog_name="sim x", standalone_mode=False)
...     except click.ClickException as exc:
...         print(said(exc))
--jobs 0: must be >= 1
--jobs x: not a whole number
--job: `sim x` has no such option (did you mean --jobs?); `sim x --help` lists them
-j needs a value
`sim x` takes no argument 'extra'; `sim x --help` says what it takes
"""

from __future__ import annotations

import os
import re

import click

__all__ = ["AtLeast", "Above", "OneOf", "PathOf", "said", "unknown_command"]


class AtLeast(click.IntRange):
    """A whole number of at least ``low`` (click's ``IntRange(min=low)``, in our words)."""

    name = "integer"

    def __init__(self, low: int):
        super().__init__(min=low)

    def _describe_range(self) -> str:
        return f">= {self.min}"

    def convert(self, value, param, ctx):
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter:
            try:
                int(value)
            except (TypeError, ValueError):
                self.fail(f"{value}: not a whole number", param, ctx)
            self.fail(f"{value}: must be >= {self.min}", param, ctx)


class Above(click.FloatRange):
    """A number above ``low`` (click's ``FloatRange(min=low, min_open=True)``)."""

    name = "number"

    def __init__(self, low: float):
        super().__init__(min=low, min_open=True)

    def _describe_range(self) -> str:
        return f"> {self.min:g}"

    def convert(self, value, param, ctx):
        try:
            number = super().convert(value, param, ctx)
        except click.BadParameter:
            try:
                float(value)
            except (TypeError, ValueError):
                self.fail(f"{value}: not a number", param, ctx)
            self.fail(f"{value}: must be > {self.min:g}", param, ctx)
        if number != number:      # nan: click's range lets it through (no comparison fails)
            self.fail(f"{value}: not a number", param, ctx)
        return number


class OneOf(click.Choice):
    """One of ``choices`` (click's ``Choice``)."""

    def convert(self, value, param, ctx):
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter:
            self.fail(f"{value}: not one of {', '.join(map(str, self.choices))}", param, ctx)


class PathOf(click.Path):
    """A path (click's ``Path``): a directory where ``file_okay=False``, a file where
    ``dir_okay=False``, existing where ``exists=True``."""

    def convert(self, value, param, ctx):
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter:
            path = os.fspath(value)
            if not os.path.exists(path):
                self.fail(f"{path}: does not exist", param, ctx)
            if os.path.isdir(path) and not self.dir_okay:
                self.fail(f"{path}: is a directory, not a file", param, ctx)
            if not os.path.isdir(path) and not self.file_okay:
                self.fail(f"{path}: is a file, not a directory", param, ctx)
            self.fail(f"{path}: not readable or not writable", param, ctx)


def unknown_command(name, commands) -> click.UsageError:
    """The error of ``sim NAME`` for a command that does not exist."""
    return click.UsageError(f"unknown command '{name}' (valid: {', '.join(commands)}); "
                            f"`sim --help` says what each does")


def said(exc: click.ClickException) -> str:
    """The one line, in the project's words, of a usage error click raised."""
    ctx = getattr(exc, "ctx", None)
    command = f"`{ctx.command_path}`" if ctx is not None else "`sim`"
    helping = f"`{ctx.command_path} --help`" if ctx is not None else "`sim --help`"
    if isinstance(exc, click.NoSuchOption):
        near = sorted(exc.possibilities or ())
        guess = f" (did you mean {' or '.join(near)}?)" if near else ""
        return f"{exc.option_name}: {command} has no such option{guess}; {helping} lists them"
    if isinstance(exc, click.BadOptionUsage) and exc.message.endswith("requires an argument."):
        return f"{exc.option_name} needs a value"
    if isinstance(exc, click.MissingParameter):
        param = exc.param
        if param is None:
            return exc.format_message()
        if param.param_type_name == "argument":
            return f"{command} needs {param.human_readable_name}; {helping} says what it takes"
        return f"{command} needs {_longest(param.opts)}; {helping} says what it takes"
    if isinstance(exc, click.BadParameter):
        if exc.param is not None and exc.param.param_type_name == "option":
            return f"{_longest(exc.param.opts)} {exc.message}"
        return exc.message
    extra = re.fullmatch(r"Got unexpected extra argument(s?) \((.*)\)", exc.message)
    if extra:
        # click joins the arguments with spaces: one argument is the whole text
        words = extra.group(2).split(" ") if extra.group(1) else [extra.group(2)]
        listed = ", ".join(f"'{w}'" for w in words)
        return (f"{command} takes no argument{'s' if len(words) > 1 else ''} {listed}; "
                f"{helping} says what it takes")
    return exc.format_message()


def _longest(opts) -> str:
    """An option's long name (``--jobs`` of ``-j``/``--jobs``)."""
    return max(opts, key=len)
