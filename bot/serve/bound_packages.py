"""The packages the channel bindings name, loaded and validated once at start-up."""

from __future__ import annotations

from pathlib import Path

from crewagent.core.api.errors import CrewError
from crewagent.core.api.packages import load_package, Package, PackageInvalid

from ..config import BotConfig


class PackageLoadFailed(CrewError):
    """A bound package is invalid: which one, and its problems (package-relative files)."""

    def __init__(self, path: Path, error: PackageInvalid) -> None:
        super().__init__(error.code, f"{path}: {error.message}", {"package": str(path)})
        self.path = path
        self.problems = error.problems


def load_packages(config: BotConfig, cache_dir: Path) -> dict[Path, Package]:
    """Load every bound package once; the first invalid one stops start-up with its problems."""
    loaded: dict[Path, Package] = {}
    for binding in config.bindings().values():
        for path in binding.packages:
            if path not in loaded:
                try:
                    loaded[path] = load_package(path, cache_dir=cache_dir)
                except PackageInvalid as exc:
                    raise PackageLoadFailed(path, exc) from None
    return loaded
