"""Packages: loading, validating, packing and importing `.bmad` packages.

The BMAD importer (`importer`: `importer.import_bmad`, `importer.write_package`, its errors and report)
loads when first asked for: serving packages never needs it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ..package.archive import pack_package
from ..package.loader import load_package, validate_path
from ..package.models import Graph, Package
from ..package.problems import PackageInvalid, Problem
from ..package.validate import bmad_tree_kind

if TYPE_CHECKING:
    from .. import bmad_import as importer

__all__ = [
    "Graph", "Package", "PackageInvalid", "Problem", "bmad_tree_kind", "importer", "load_package", "pack_package",
    "validate_path",
]


def __getattr__(name: str) -> Any:
    if name == "importer":
        return importlib.import_module("..bmad_import", __package__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
