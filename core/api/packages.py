"""Packages: loading, validating, packing and importing `.bmad` packages.

The BMAD importer loads when first asked for: serving packages never needs it. So does the scripts'
preparer (`ScriptsPreparer`), which only packages with scripts need.
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
    from ..bmad_import import BmadImportError, ImportReport, OutputExists, import_bmad, write_package
    from ..package.script_deps import (
        ScriptsPreparer, ScriptsReady, close_scripts, script_deps_dir, scripts_sandbox_extras, warm_scripts,
    )

_ON_FIRST_USE = {
    **dict.fromkeys(("BmadImportError", "ImportReport", "OutputExists", "import_bmad", "write_package"), "..bmad_import"),
    **dict.fromkeys(("ScriptsPreparer", "ScriptsReady", "close_scripts", "script_deps_dir", "scripts_sandbox_extras",
                     "warm_scripts"), "..package.script_deps"),
}

__all__ = [
    "BMAD_TREE_CODE", "BmadImportError", "Graph", "ImportReport", "OutputExists", "Package", "PackageInvalid",
    "Problem", "ScriptsPreparer", "ScriptsReady", "bmad_tree_kind", "close_scripts", "import_bmad", "load_package",
    "pack_package", "script_deps_dir", "scripts_sandbox_extras", "validate_path", "warm_scripts", "write_package",
]


def __getattr__(name: str) -> Any:
    if name in _ON_FIRST_USE:
        return getattr(importlib.import_module(_ON_FIRST_USE[name], __package__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
