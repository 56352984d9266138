"""Packages: loading, validating, packing and importing `.bmad` packages.

The BMAD importer (`importer`: `importer.import_bmad`, `importer.write_package`, its errors and report)
loads when first asked for: serving packages never needs it. So does script preparation
(`warm_scripts`, `close_scripts`), which only packages with scripts need.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ..package.archive import pack_package
from ..package.loader import load_package, validate_path
from ..package.models import Graph, Package
from ..package.problems import PackageInvalid, Problem
from ..package.validate import BMAD_TREE_CODE, bmad_tree_kind

if TYPE_CHECKING:
    from .. import bmad_import as importer
    from ..package.script_deps import close_scripts, warm_scripts

_ON_FIRST_USE = dict.fromkeys(("close_scripts", "warm_scripts"), "..package.script_deps")

__all__ = [
    "BMAD_TREE_CODE", "Graph", "Package", "PackageInvalid", "Problem", "bmad_tree_kind", "close_scripts", "importer",
    "load_package", "pack_package", "validate_path", "warm_scripts",
]


def __getattr__(name: str) -> Any:
    if name == "importer":
        return importlib.import_module("..bmad_import", __package__)
    if name in _ON_FIRST_USE:
        return getattr(importlib.import_module(_ON_FIRST_USE[name], __package__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
