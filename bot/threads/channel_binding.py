"""One channel binding at run time: the project a channel works on and the packages it offers."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from crewagent.core.api.checkout import Checkout
from crewagent.core.api.packages import Package
from crewagent.core.api.sessions import SessionService


@dataclass
class BindingRuntime:
    """One channel binding at run time: its project, its loaded packages and their session service."""

    name: str
    project: Path
    packages: list[Package]
    service: SessionService
    checkout: Checkout | None = None  # None: a plain folder, as before

    def package(self, package_id: str | None) -> Package | None:
        return next((p for p in self.packages if p.id == package_id), None)
