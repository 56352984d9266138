"""Files the tests read in place from beside the repository (`../shared`), and how a test says it skips.

The BMAD-METHOD trees and the public reference schemas are not ours to copy into the project. Where a
checkout has no `../shared` folder beside it, only the tests that read those files are skipped, and the
reason says what is missing, which tests need it and that the rest of the suite does not.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.support.paths import REPO

SHARED = REPO.parent / "shared"
FIXTURES = SHARED / "fixtures"
BMAD_V6_SRC = FIXTURES / "bmad-method-v6.0.0" / "src"
BMAD_V62_SRC = FIXTURES / "bmad-method-v6.2.0" / "src"
BMAD_V611_SRC = FIXTURES / "bmad-method-v6.11.0" / "src"
REFERENCE_SCHEMAS = SHARED / "spec" / "reference-schemas-v1.1"

_WHAT = {
    BMAD_V6_SRC: ("BMAD-METHOD v6.0.0 fixture", "the importer's and router's real-tree tests"),
    BMAD_V62_SRC: ("BMAD-METHOD v6.2.0 fixture", "the skill-folder import tests"),
    BMAD_V611_SRC: ("BMAD-METHOD v6.11.0 fixture", "the agent-skill and team-override import tests"),
    REFERENCE_SCHEMAS: ("public .bmad v1.1 reference schemas", "the schema-equivalence tests"),
}


def missing_reason(path: Path) -> str:
    """`BMAD-METHOD v6.0.0 fixture not found at ../shared/fixtures/...: ... need it; the rest of the suite does not`."""
    what, needed_by = _WHAT.get(path, ("shared test file", "a few tests"))
    shown = os.path.relpath(path, REPO)
    return f"{what} not found at {shown}: {needed_by} need it; the rest of the suite does not"


def needs(path: Path) -> pytest.MarkDecorator:
    """Mark a test (or a module, as `pytestmark`) that reads `path` under ../shared."""
    return pytest.mark.skipif(not path.exists(), reason=missing_reason(path))


def require(path: Path) -> None:
    """Inside a fixture or a test: skip with the same reason when `path` is not there."""
    if not path.exists():
        pytest.skip(missing_reason(path))
