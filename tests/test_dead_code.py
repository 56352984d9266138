"""No dead code in the product: vulture, at the confidence where it is right, finds nothing in core/, bot/ or cli/."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.paths import REPO


def test_vulture_finds_no_unused_code() -> None:
    pytest.importorskip("vulture", reason="vulture comes with the test extras: pip install -e '.[test]'")
    found = subprocess.run(
        [sys.executable, "-m", "vulture", "--min-confidence", "80", "core", "bot", "cli"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert found.stdout == "" and found.returncode == 0, found.stdout + found.stderr
