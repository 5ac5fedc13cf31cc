"""Errors a user can cause (bad input); the CLI prints them as one line, exit 2."""

import reprlib

__all__ = ["UserError", "LimitExceeded", "shown"]


class UserError(Exception):
    """Bad input: unknown name, malformed file, impossible parameter."""


class LimitExceeded(UserError):
    """A run went over its op, memory or time budget, or asked for a tensor larger than
    its limit (:class:`sim.engine.simulation.Limits`)."""


def shown(value) -> str:
    """A short one-line ``repr`` of a bad value for an error line (a long list, string or
    400-digit integer shortened with ``...``; a user's ``__repr__`` that raises gives the
    type's name)."""
    try:
        text = reprlib.repr(value)
    except Exception:  # a user's __repr__ that raises
        text = f"a {type(value).__name__}"
    return " ".join(text.split())
