"""File references inside BMAD texts: find them, resolve them, and rewrite them to package paths.

BMAD files point at each other in several ways: `{project-root}/_bmad/bmm/...`, `./step-02.md`,
`../templates/x.md`, `{installed_path}/template.md`, `{workflow_path}/...` (a frontmatter value),
or a frontmatter key used in the body (`{nextStepFile}`). Everything carried into the package keeps
its `_bmad/`-relative path, so a resolved reference becomes `@pkg/_bmad/<path>`. Scripts are files
too: `uv run {project-root}/_bmad/scripts/memlog.py`, `uv run {skill-root}/scripts/x.py` and a bare
`scripts/x.py` in a skill all become `uv run @pkg/_bmad/.../x.py`.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import Literal

from .source import BmadSource, is_classic

PACKAGE_PREFIX = "_bmad/"
_TOKEN = re.compile(r"(?<![\w./{}@*-])[\w.{}@-]+(?:/[\w.{}@-]+)*\.(?:md|csv|yaml|yml|xml|json|txt|py)(?![\w-])")
_VAR = re.compile(r"\{([A-Za-z0-9_-]+)\}")
_FOLDER = re.compile(r"\{project-root\}/_bmad/([\w./-]+)")
_SKILL_ROOT = re.compile(r"\{skill-root\}(?:/([\w./-]*[\w-]))?(/?)")
_PROJECT_BMAD = ("{project-root}/_bmad/", "_bmad/")
_SKILL_MACHINERY = ("SKILL.md", "customize.toml", "bmad-skill-manifest.yaml")  # never carried as files
Kind = Literal["file", "generated", "classic", "missing"]


@dataclass(frozen=True)
class Ref:
    token: str  # as written
    rel: str  # `_bmad/`-relative path
    kind: Kind


def package_alias(rel: str) -> str:
    return f"@pkg/{PACKAGE_PREFIX}{rel}"


class Resolver:
    """Resolves references written in one file (`base`, `_bmad/`-relative) with its variables."""

    def __init__(self, source: BmadSource, generated: set[str], base: str, variables: dict[str, str]) -> None:
        self.source = source
        self.generated = generated
        self.base_dir = posixpath.dirname(base)
        self.skill_folder = self._skill_folder()
        self.variables = variables
        if self.skill_folder and "skill-root" not in variables:  # carried skill files (`references/x.md`)
            self.variables = {**variables, "skill-root": "{project-root}/_bmad/" + self.skill_folder}

    def expand(self, token: str) -> str:
        for _ in range(4):
            new = _VAR.sub(lambda m: self.variables.get(m.group(1), m.group(0)), token)
            if new == token:
                break
            token = new
        return token

    def resolve(self, token: str) -> Ref | None:
        """None for anything that is not a reference to a BMAD file (project paths, plain words)."""
        text = self.expand(token.strip().strip("`'\""))
        explicit = text.startswith(("./", "../", *_PROJECT_BMAD)) or "/" in text
        rel: str | None = None
        for prefix in _PROJECT_BMAD:
            if text.startswith(prefix):
                rel = posixpath.normpath(text[len(prefix):])
                break
        if rel is None:
            if text.startswith(("{", "@", "/")) or "{" in text:
                return None
            rel = posixpath.normpath(posixpath.join(self.base_dir, text))
        if rel.startswith("..") or "{" in rel:
            return None
        if is_classic(rel) and (explicit or self.source.exists(rel)):
            return Ref(token, rel, "classic")
        if self.source.exists(rel):
            return Ref(token, rel, "file")
        beside = self._beside_workflow(text) or self._from_skill_root(text)
        if beside is not None:
            return Ref(token, beside, "file")
        if rel in self.generated:
            return Ref(token, rel, "generated")
        if rel.endswith(".py") and not text.startswith(_PROJECT_BMAD):
            return None  # `src/app.py` in a dev step is the project's code, not a missing BMAD script
        return Ref(token, rel, "missing") if explicit else None

    def _beside_workflow(self, text: str) -> str | None:
        """`data/x.md` written in a step file often means the workflow folder's `data/x.md`."""
        folder = self.variables.get("installed_path", "").removeprefix("{project-root}/_bmad/")
        if not folder or "{" in folder or text.startswith(("./", "../", "{", "@", "/", *_PROJECT_BMAD)):
            return None
        rel = posixpath.normpath(posixpath.join(folder, text))
        return rel if not rel.startswith("..") and self.source.exists(rel) else None

    def _from_skill_root(self, text: str) -> str | None:
        """In a skill (v6.1+), a bare path (`references/x.md`, `assets/t.md`) resolves from the skill's root."""
        if text.startswith(("./", "../", "{", "@", "/", *_PROJECT_BMAD)):
            return None
        folder = self.base_dir
        while folder and not self.source.exists(f"{folder}/SKILL.md"):
            folder = posixpath.dirname(folder)
        if not folder or folder == self.base_dir:
            return None
        rel = posixpath.normpath(posixpath.join(folder, text))
        return rel if not rel.startswith("..") and self.source.exists(rel) else None

    def _skill_folder(self) -> str:
        """The folder of the skill this file belongs to (its nearest `SKILL.md`), "" outside skills."""
        folder = self.base_dir
        while folder and not self.source.exists(f"{folder}/SKILL.md"):
            folder = posixpath.dirname(folder)
        return folder

    def refs(self, text: str) -> list[Ref]:
        out: list[Ref] = []
        for match in _TOKEN.finditer(text):
            ref = self.resolve(match.group(0))
            if ref is not None:
                out.append(ref)
        return out

    def rewrite(self, text: str, keep: set[str] | None = None) -> str:
        """Every resolvable reference becomes its `@pkg/_bmad/...` alias; the rest stays as written."""

        def swap(match: re.Match[str]) -> str:
            ref = self.resolve(match.group(0))
            if ref is None or ref.kind not in ("file", "generated") or (keep is not None and ref.rel not in keep):
                return match.group(0)
            return package_alias(ref.rel)

        text = _FOLDER.sub(self._swap_folder, _TOKEN.sub(swap, text))
        return _SKILL_ROOT.sub(self._swap_skill_root, text) if self.skill_folder else text

    def _swap_folder(self, match: re.Match[str]) -> str:
        """`{project-root}/_bmad/bmm/workflows/x` (a folder, as in `workflow_path`) -> `@pkg/_bmad/...`."""
        folder = match.group(1).rstrip("/.")
        carried = any(f.startswith(folder + "/") for f in (*self.source.files, *self.generated))
        return package_alias(folder) if carried else match.group(0)

    def _swap_skill_root(self, match: re.Match[str]) -> str:
        """`{skill-root}` alone (`--skill {skill-root}`) or before a carried folder (`{skill-root}/scripts/`)."""
        inner = match.group(1)
        folder = posixpath.normpath(f"{self.skill_folder}/{inner}") if inner else self.skill_folder
        carried = any(f.startswith(folder + "/") and posixpath.basename(f) not in _SKILL_MACHINERY
                      for f in self.source.files)
        if not carried or folder.startswith(".."):
            return match.group(0)
        return package_alias(folder) + ("/" if match.group(2) else "")
