"""Errors a user can cause (bad input); the CLI prints them as one line, exit 2."""

__all__ = ["UserError"]


class UserError(Exception):
    """Bad input: unknown name, malformed file, impossible parameter."""
