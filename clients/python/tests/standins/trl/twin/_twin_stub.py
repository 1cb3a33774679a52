"""Minimal stubs for the heavy imports of TRL's real modules, for the twin tests (test_adapter_trl.py).

The twin tests load TRL's own files from the mirror. Their heavy
dependencies (transformers, accelerate, datasets, vLLM, ...) are not
installed; each has a directory here whose ``__init__`` calls
:func:`stub_package`, so it is importable by path, in the test process and
in a spawned worker alike. In a stub module every missing attribute is a
placeholder class (subclassable, callable, and an Exception so it may sit
in an ``except`` tuple), ``is_*_available`` functions return False, and
submodules are stubs too. Nothing here imitates behaviour; code that needs
behaviour gets an explicit attribute.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any, Optional, Sequence

_STUBBED: set = set()


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


class _PlaceholderMeta(type):
    """_PlaceholderMeta gives placeholder classes placeholder class attributes (``Dataset.from_dict``)."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _noop


class Placeholder(Exception, metaclass=_PlaceholderMeta):
    """Placeholder stands for any class of a stubbed package; its instances answer any method with None."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _noop

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        return None


def _false(*args: Any, **kwargs: Any) -> bool:
    return False


class StubModule(types.ModuleType):
    """StubModule is a module of a stubbed package: missing attributes are placeholders."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if name.startswith("is_") and name.endswith("_available"):
            value: Any = _false
        else:
            value = _PlaceholderMeta(name, (Placeholder,), {"__module__": self.__name__})
        setattr(self, name, value)
        return value


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return StubModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        module.__path__ = []  # type: ignore[attr-defined]


class _StubFinder(importlib.abc.MetaPathFinder):
    """_StubFinder makes every submodule of a stubbed package that no file provides a stub (it runs after the path finder)."""

    def find_spec(self, fullname: str, path: Optional[Sequence[str]], target: Any = None) -> Optional[importlib.machinery.ModuleSpec]:
        if not any(fullname.startswith(prefix + ".") for prefix in _STUBBED):
            return None
        return importlib.machinery.ModuleSpec(fullname, _StubLoader(), is_package=True)


def _install_finder() -> None:
    if not any(isinstance(f, _StubFinder) for f in sys.meta_path):
        sys.meta_path.append(_StubFinder())


def stub_package(name: str, **attrs: Any) -> None:
    """stub_package turns the package being imported into a stub module with attrs set; its submodules are stubs too."""
    _install_finder()
    _STUBBED.add(name)
    module = sys.modules[name]
    module.__class__ = StubModule
    for k, v in attrs.items():
        setattr(module, k, v)


def stub_module(name: str, **attrs: Any) -> StubModule:
    """stub_module replaces the module name (and its submodules) of an installed package by stubs, in this process only.

    For parts of an installed package that cannot be imported here (torch
    1.13's FSDP on Python 3.11). The caller restores sys.modules.
    """
    _install_finder()
    _STUBBED.add(name)
    module = StubModule(name)
    module.__path__ = []  # type: ignore[attr-defined]
    for k, v in attrs.items():
        setattr(module, k, v)
    sys.modules[name] = module
    return module
