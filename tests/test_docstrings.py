"""Every public function has an Examples section, and every example runs (issue 27).

"Public" is what a reader of the API reference sees: the functions and classes in the
``__all__`` of each module whose path has no underscore part. Each must carry a numpydoc
``Examples`` section whose ``>>>`` lines are run here as doctests, with NumPy's printing fixed
(``np.set_printoptions(precision=6, suppress=True)``) so that an example shows what a reader
gets. Examples that need an optional extra are skipped with a message when it is missing.
Every public function is also fully annotated (parameters and return value).
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import pkgutil

import numpy as np
import pytest

import posenc_np

#: modules whose examples need an optional extra (module -> the import that must work)
NEEDS = {"posenc_np.sklearn": "sklearn", "posenc_np.study.figures": "matplotlib",
         "posenc_np.study.executors": "distributed"}


def _public_modules() -> list[str]:
    names = ["posenc_np"]
    for info in pkgutil.walk_packages(posenc_np.__path__, "posenc_np."):
        if not any(part.startswith("_") for part in info.name.split(".")[1:]):
            names.append(info.name)
    return sorted(names)


MODULES = _public_modules()


def _public(module) -> list[tuple[str, object]]:
    """``(name, object)`` of the functions and classes ``module`` defines and exports."""
    out = []
    for name in getattr(module, "__all__", ()):
        obj = getattr(module, name, None)
        if (inspect.isfunction(obj) or inspect.isclass(obj)) and obj.__module__ == module.__name__:
            out.append((name, obj))
    return out


def _import(name: str):
    if name in NEEDS:
        pytest.importorskip(NEEDS[name], reason=f"{name}'s examples need the optional {NEEDS[name]!r} extra")
    return importlib.import_module(name)


@pytest.mark.parametrize("name", MODULES)
def test_every_public_function_and_class_has_an_examples_section(name):
    module = _import(name)
    missing = [n for n, obj in _public(module) if "Examples\n" not in (inspect.getdoc(obj) or "") + "\n"
               or ">>>" not in (obj.__doc__ or "")]
    assert not missing, f"{name}: no Examples section with >>> lines in {missing}"


@pytest.mark.parametrize("name", MODULES)
def test_examples_run(name):
    module = _import(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    old = np.get_printoptions()
    np.set_printoptions(precision=6, suppress=True)
    try:
        for test in finder.find(module, name, globs={"np": np}):
            if test.name.rsplit(".", 1)[-1].startswith("_"):
                continue
            runner.run(test, clear_globs=True)
    finally:
        np.set_printoptions(**old)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} example lines failed (output above)"


@pytest.mark.parametrize("name", MODULES)
def test_public_functions_are_fully_annotated(name):
    module = _import(name)
    bare = []
    for n, obj in _public(module):
        functions = [(n, obj)] if inspect.isfunction(obj) else \
            [(f"{n}.{m}", f) for m, f in vars(obj).items() if inspect.isfunction(f) and not m.startswith("_")]
        for label, fn in functions:
            sig = inspect.signature(fn)
            params = [p for p in sig.parameters.values() if p.name not in ("self", "cls")]
            if any(p.annotation is inspect.Parameter.empty for p in params) or \
                    sig.return_annotation is inspect.Signature.empty:
                bare.append(label)
    assert not bare, f"{name}: not fully annotated: {bare}"
