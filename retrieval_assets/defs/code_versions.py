"""Asset code versions: a hash of the source an asset runs, so the Dagster UI marks as stale every
asset whose code or settings defaults changed since it was last materialized.

What counts as an asset's source: its decorated function, the project functions it calls (and
theirs), the project classes it names or takes as parameters (resources and configs, with their
bases and the settings classes of their fields: the defaults), the values of the plain constants
it names, and the whole text of every ``core`` module it names a function of. Text and names
only, never ids or times, so every process computes the same version.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import sys
import typing
from collections.abc import Callable, Iterator
from types import CodeType, FunctionType, ModuleType
from typing import Any

from dagster import AssetsDefinition
from pydantic import BaseModel

PROJECT = "retrieval_assets"
_CONSTANT_TYPES = (str, int, float, bool, bytes, tuple, list, dict, set, frozenset, type(None))


def asset_function(assets_def: AssetsDefinition) -> Callable[..., Any]:
    """The function an asset (or multi-asset) was decorated from."""
    compute_fn: Any = assets_def.op.compute_fn
    return compute_fn.decorated_fn if hasattr(compute_fn, "decorated_fn") else compute_fn


def code_version(function: Callable[..., Any], project: str = PROJECT) -> str:
    """16 hex digits that change when ``function``'s source or anything it depends on in
    ``project`` changes (see the module's docstring)."""
    sources = _Sources(project)
    sources.add_function(function)
    digest = hashlib.sha256()
    for name in sorted(sources.texts):
        digest.update(f"{name}\0{sources.texts[name]}\0".encode())
    return digest.hexdigest()[:16]


class _Sources:
    """The texts an asset depends on, by a name unique to each (module, qualified name)."""

    def __init__(self, project: str) -> None:
        self.project = project
        self.core = f"{project}.core"
        self.texts: dict[str, str] = {}

    def _ours(self, module_name: str | None) -> bool:
        return module_name is not None and (module_name == self.project or module_name.startswith(f"{self.project}."))

    def _in_core(self, module_name: str) -> bool:
        return module_name == self.core or module_name.startswith(f"{self.core}.")

    def add_function(self, function: Callable[..., Any]) -> None:
        name = f"{function.__module__}:{function.__qualname__}"
        if name in self.texts:
            return
        self.texts[name] = _source(function)
        if isinstance(function, FunctionType):
            for global_name in _global_names(function.__code__):
                if global_name in function.__globals__ and not global_name.startswith("__"):
                    self.add_object(global_name, function.__globals__[global_name], function.__module__)
        for hint in _hints(function):
            self.add_object(getattr(hint, "__name__", ""), hint, function.__module__)

    def add_object(self, name: str, value: Any, where: str) -> None:
        if isinstance(value, ModuleType):
            if self._ours(value.__name__) and self._in_core(value.__name__):
                self.add_module(value)
        elif isinstance(value, type):
            self.add_class(value)
        elif isinstance(value, FunctionType):
            if self._ours(value.__module__) and self._in_core(value.__module__):
                self.add_module(sys.modules[value.__module__])
            elif self._ours(value.__module__):
                self.add_function(value)
        elif isinstance(value, _CONSTANT_TYPES) and self._ours(where):
            self.texts.setdefault(f"{where}:{name}", _constant_text(value))

    def add_class(self, cls: type) -> None:
        name = f"{cls.__module__}:{cls.__qualname__}"
        if not self._ours(cls.__module__) or name in self.texts:
            return
        self.texts[name] = _source(cls)
        for base in cls.__mro__[1:]:
            self.add_class(base)
        if issubclass(cls, BaseModel):
            for field in cls.model_fields.values():
                for annotation in _classes_in(field.annotation):
                    self.add_class(annotation)

    def add_module(self, module: ModuleType) -> None:
        self.texts.setdefault(module.__name__, _source(module))


@functools.cache
def _source(obj: Any) -> str:
    """``obj``'s source text, read once per process: the 18 assets share most of their classes
    and modules, and finding a class's source parses its whole module."""
    return inspect.getsource(obj)


def _global_names(code: CodeType) -> Iterator[str]:
    """The global (and attribute) names a code object and the functions nested in it use."""
    yield from code.co_names
    for constant in code.co_consts:
        if isinstance(constant, CodeType):
            yield from _global_names(constant)


def _hints(function: Callable[..., Any]) -> list[Any]:
    """The classes named by ``function``'s parameter and return annotations (generics unpacked)."""
    hints = typing.get_type_hints(function)
    return [cls for hint in hints.values() for cls in _classes_in(hint)]


def _classes_in(annotation: Any) -> Iterator[type]:
    if isinstance(annotation, type):
        yield annotation
    for argument in typing.get_args(annotation):
        yield from _classes_in(argument)


def _constant_text(value: Any) -> str:
    # Sets print in hash order, which differs between processes.
    return repr(sorted(value, key=repr)) if isinstance(value, (set, frozenset)) else repr(value)
