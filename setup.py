"""Maps the source folders core/, bot/ and cli/ to crewagent.core, crewagent.bot and crewagent.cli.

pyproject.toml holds everything else; only the mapping needs code, because its package list is
found from the folders (a new sub-package is picked up without editing a list).
"""

from setuptools import find_packages, setup

FOLDERS = ("core", "bot", "cli")

setup(
    packages=["crewagent", *(f"crewagent.{name}" for name in find_packages(include=[f"{f}*" for f in FOLDERS]))],
    package_dir={"crewagent": "crewagent", **{f"crewagent.{folder}": folder for folder in FOLDERS}},
)
