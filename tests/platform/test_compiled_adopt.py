"""How a source module adopts its compiled build (sim.platform.compiled.adopt_compiled,
shared by ptmalloc.py and heap.py): only a build of its very text, never under
``SIM_PURE_*``, never the build itself; a build of another text is refused with one
warning line and the module keeps its Python."""

import hashlib
import sys
import types
import warnings

import pytest

from sim.platform.compiled import adopt_compiled

NAME, EXTENSION, PURE = "sim.platform._test_source", "_test_source_c", "SIM_PURE_TEST"


class Source:
    """The source's own class."""


class Built:
    """What the build holds instead."""


@pytest.fixture
def module(tmp_path, monkeypatch):
    """``(namespace of a source module, its build)``: the build of this very text."""
    path = tmp_path / "source.py"
    path.write_text("class Source: pass\n")
    build = types.ModuleType(f"sim.platform.{EXTENSION}")
    build.__file__ = str(tmp_path / f"{EXTENSION}.so")
    build.Source, build.helper = Built, len
    build.SOURCE_SHA256 = hashlib.sha256(path.read_bytes()).hexdigest()
    monkeypatch.setitem(sys.modules, build.__name__, build)
    monkeypatch.delenv(PURE, raising=False)
    return {"__name__": NAME, "__file__": str(path), "Source": Source}, build


def adopt(namespace):
    adopt_compiled(namespace, NAME, EXTENSION, PURE, "the test model")


def test_a_build_of_the_same_text_is_adopted(module):
    namespace, build = module
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        adopt(namespace)
    assert namespace["Source"] is Built and namespace["helper"] is len
    assert "SOURCE_SHA256" not in namespace and namespace["__name__"] == NAME


def test_a_build_of_another_text_is_refused_with_one_warning_line(module, capsys):
    """The refusal was a UserWarning: two lines on stderr, the first naming this module's
    line, the second the call's source (session 58's list); now the project's one
    ``sim: warning:`` line, and the module keeps its Python."""
    namespace, build = module
    build.SOURCE_SHA256 = "0" * 64
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        adopt(namespace)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"sim: warning: {build.__file__} was compiled from another version of "
        f"{namespace['__file__']}; the test model runs as Python (`pip install -e .` "
        f"rebuilds it)\n")
    assert namespace["Source"] is Source and "helper" not in namespace


def test_pure_the_build_itself_or_no_build_keep_the_python(module, monkeypatch):
    namespace, build = module
    monkeypatch.setenv(PURE, "1")
    adopt(namespace)
    assert namespace["Source"] is Source
    monkeypatch.delenv(PURE)
    adopt(dict(namespace, __name__=build.__name__))      # the build runs it too
    monkeypatch.delitem(sys.modules, build.__name__)       # no build: nothing to import
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        adopt(namespace)
    assert namespace["Source"] is Source and "helper" not in namespace
