"""Attributes of a package imported on first use (PEP 562): the package's `__getattr__` and `__dir__`."""

import importlib


def lazy_attributes(package: str, namespace: dict, exports: dict[str, str]):
    """`__getattr__` and `__dir__` for `package`, whose module globals are `namespace`, importing each name of
    `exports` from its relative module (`exports[name]`) when first read and keeping it in the namespace."""

    def __getattr__(name: str):
        if name in exports:
            value = getattr(importlib.import_module(exports[name], package), name)
            namespace[name] = value
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted([*namespace, *exports])

    return __getattr__, __dir__
