"""Loading a user's Python file (a workload or a policy) as a module of its own."""

from __future__ import annotations

import importlib.util

from .errors import UserError

__all__ = ["exec_user_file"]


def exec_user_file(path, prefix):
    """Execute the Python file ``path`` as a new module named ``<prefix>_<hash of path>``.

    Returns the module. A syntax error or any exception raised while the file runs
    is a :class:`~sim.errors.UserError` naming the file (a ``UserError`` it raises
    itself passes through).
    """
    module_name = f"{prefix}_{abs(hash(str(path)))}"
    try:
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise UserError(f"{path}: syntax error at line {exc.lineno}: {exc.msg}") from None
    except UserError:
        raise
    except Exception as exc:  # a user's file raising at import
        raise UserError(f"{path}: raised {type(exc).__name__} while loading: {exc}") from None
    return module
