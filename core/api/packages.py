"""Packages: loading, validating, packing and importing `.bmad` packages."""

from __future__ import annotations

from ..bmad_import import BmadImportError, import_bmad, write_package
from ..package.archive import pack_package
from ..package.loader import load_package, validate_path
from ..package.models import Graph, Package
from ..package.problems import PackageInvalid, Problem
from ..package.validate import BMAD_TREE_CODE, bmad_tree_kind

__all__ = [
    "BMAD_TREE_CODE", "BmadImportError", "Graph", "Package", "PackageInvalid", "Problem",
    "bmad_tree_kind", "import_bmad", "load_package", "pack_package", "validate_path", "write_package",
]
