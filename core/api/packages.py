"""Packages: loading, validating, packing and importing `.bmad` packages.

The BMAD importer loads when first asked for: serving packages never needs it.
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
    from ..bmad_import import BmadImportError, import_bmad, ImportReport, OutputExists, write_package

_ON_FIRST_USE = {
    "BmadImportError": "..bmad_import", "import_bmad": "..bmad_import", "ImportReport": "..bmad_import",
    "OutputExists": "..bmad_import",
    "write_package": "..bmad_import",
}

__all__ = [
    "BMAD_TREE_CODE", "BmadImportError", "Graph", "ImportReport", "Package", "PackageInvalid", "Problem",
    "bmad_tree_kind", "import_bmad", "load_package", "OutputExists", "pack_package", "validate_path", "write_package",
]


def __getattr__(name: str) -> Any:
    if name in _ON_FIRST_USE:
        return getattr(importlib.import_module(_ON_FIRST_USE[name], __package__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
