"""Where the BMAD files are: a source tree (`src/`) or an installed `_bmad/` folder.

Both layouts are addressed the same way, by paths relative to the `_bmad/` root an installation
would have (`bmm/workflows/...`, `core/tasks/...`), because that is how BMAD files refer to each
other (`{project-root}/_bmad/bmm/...`). The few files an installer would generate or move (agent
sidecars, `_config/*.csv`, `<module>/config.yaml`) are mapped here too.
"""

from __future__ import annotations

import posixpath
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml

from crewagent.core.base import safe_yaml

Layout = Literal["source", "installed"]
CLASSIC_WORKFLOW_NAMES = ("workflow.yaml", "workflow.yml", "instructions.xml", "workflow.xml")
SKIPPED_DIRS = {"node_modules", ".git", "__pycache__"}


class SourceError(Exception):
    """The path is not a BMAD tree; the message says what was expected."""


@dataclass
class BmadSource:
    """A BMAD tree on disk; every `rel` below is relative to the `_bmad/` root."""

    root: Path
    layout: Layout
    modules: list[str]
    files: set[str] = field(default_factory=set)
    aliases: dict[str, str] = field(default_factory=dict)  # install path -> path in this tree (sidecars)
    problems: dict[str, str] = field(default_factory=dict)  # file -> what is wrong with it (for the report)

    def path(self, rel: str) -> Path:
        return self.root / self.aliases.get(rel, rel)

    def exists(self, rel: str) -> bool:
        return rel in self.files or rel in self.aliases

    def read(self, rel: str) -> str:
        try:
            return self.path(rel).read_text(encoding="utf-8-sig")
        except UnicodeDecodeError:
            raise SourceError(f"{rel} is not UTF-8 text; save it as UTF-8 and import again") from None
        except OSError as exc:
            raise SourceError(f"{rel} cannot be read ({exc.strerror or 'I/O error'})") from None

    def skill_dirs(self) -> list[str]:
        """Folders holding a `SKILL.md` (v6.1+): every workflow and, from v6.6, every agent is one."""
        return sorted(posixpath.dirname(f) for f in self.files if posixpath.basename(f) == "SKILL.md")

    def agent_files(self) -> list[str]:
        return sorted(f for f in self.files if f.endswith(".agent.yaml"))

    def compiled_agents(self) -> list[str]:
        """Installed agents compiled to markdown (`<module>/agents/x.md`): reported, not imported."""
        return sorted(f for f in self.files if re.fullmatch(r"[^/]+/agents/[^/]+\.md", f))

    def workflow_files(self) -> list[str]:
        """Step-file workflow entry files: `workflow.md` or `workflow-*.md` outside step folders."""
        return sorted(
            f for f in self.files
            if (name := f.rsplit("/", 1)[-1]).endswith(".md") and (name == "workflow.md" or name.startswith("workflow-"))
            and not any(part.startswith("step") for part in f.split("/")[:-1])
        )

    def classic_workflows(self) -> list[str]:
        return sorted(f for f in self.files if f.rsplit("/", 1)[-1] in ("workflow.yaml", "workflow.yml")
                      or (f.rsplit("/", 1)[-1] == "workflow.xml" and "/workflows/" in f"/{f}"))

    def module_config(self, module: str) -> tuple[str, dict]:
        """(`module.yaml` or `config.yaml` rel path, its mapping), empty when neither exists."""
        for name in ("module.yaml", "config.yaml"):
            rel = f"{module}/{name}"
            if rel in self.files:
                try:
                    data = safe_yaml.load(self.read(rel))
                except yaml.YAMLError as exc:
                    mark = getattr(exc, "problem_mark", None)
                    line = f" at line {mark.line + 1}" if mark is not None else ""
                    self.problems[rel] = (f"not valid YAML{line} ({getattr(exc, 'problem', None) or 'parse error'}); "
                                          "its settings were not used: fix that line and import again")
                    data = None
                return rel, data if isinstance(data, dict) else {}
        return "", {}


def is_classic(rel: str) -> bool:
    name = rel.rsplit("/", 1)[-1].lower()
    return name in CLASSIC_WORKFLOW_NAMES


def open_source(path: Path) -> BmadSource:
    """Find the BMAD root under `path`: `src/`, an installed `_bmad/`, or a folder holding `_bmad/`."""
    path = path.resolve()
    if not path.is_dir():
        raise SourceError(f"{path.name}: no such directory")
    if (path / "_bmad").is_dir():
        path = path / "_bmad"
    elif (path / "src").is_dir() and not _module_dirs(path) and _module_dirs(path / "src"):
        path = path / "src"
    modules = _module_dirs(path) or _central_modules(path)
    if not modules:
        raise SourceError(
            f"{path.name}: no BMAD modules found (expected folders such as core/ or bmm/ with a module.yaml, "
            "a config.yaml, agents/ or workflows/)"
        )
    layout: Layout = "installed" if (path / "config.toml").is_file() or any(
        (path / m / "config.yaml").is_file() for m in modules) else "source"
    codes = {m: _module_code(path / m) for m in modules}
    source = BmadSource(path, layout, sorted(set(codes.values())))
    for file in sorted(path.rglob("*")):
        if file.is_file() and not file.is_symlink() and not (set(file.relative_to(path).parts) & SKIPPED_DIRS):
            real = file.relative_to(path).as_posix()
            folder, _, rest = real.partition("/")
            if rest and codes.get(folder, folder) != folder:  # `bmm-skills/...` is installed as `bmm/...`
                source.aliases[f"{codes[folder]}/{rest}"] = real
                real = f"{codes[folder]}/{rest}"
            source.files.add(real)
    if layout == "source":
        _alias_sidecars(source)
    elif path.name == "_bmad" and not source.skill_dirs():
        _add_tool_skills(source, path.parent)
    return source


TOOL_SKILL_DIRS = (".claude/skills", ".agents/skills", ".cursor/skills", ".agent/skills", ".github/skills",
                   ".windsurf/skills", ".opencode/skills", ".codex/skills", ".gemini/skills")


def _add_tool_skills(source: BmadSource, project: Path) -> None:
    """BMAD v6.6+ installs its skills where the team's coding tool reads them (`.claude/skills/bmad-*/`),
    beside `_bmad/`; they are addressed as `skills/<name>/...` here. The first such folder is used."""
    for folder in TOOL_SKILL_DIRS:
        base = project / folder
        skills = sorted(d for d in base.glob("bmad-*") if (d / "SKILL.md").is_file()) if base.is_dir() else []
        if not skills:
            continue
        for skill in skills:
            for file in sorted(skill.rglob("*")):
                if file.is_file() and not file.is_symlink() and not (set(file.relative_to(skill).parts) & SKIPPED_DIRS):
                    rel = f"skills/{skill.name}/{file.relative_to(skill).as_posix()}"
                    source.files.add(rel)
                    source.aliases[rel] = f"../{folder}/{skill.name}/{file.relative_to(skill).as_posix()}"
        return


def _module_dirs(path: Path) -> list[str]:
    if not path.is_dir():
        return []
    return sorted(
        d.name for d in path.iterdir()
        if d.is_dir() and not d.name.startswith((".", "_"))
        and any((d / marker).exists() for marker in ("module.yaml", "config.yaml", "agents", "workflows"))
    )


def _central_modules(path: Path) -> list[str]:
    """A v6.6+ installation may keep no module folders, only `config.toml` with `[core]` and `[modules.<code>]`."""
    try:
        data = tomllib.loads((path / "config.toml").read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return []
    modules = data.get("modules") if isinstance(data.get("modules"), dict) else {}
    return sorted({"core", *(m for m in modules if re.fullmatch(r"[a-z0-9][a-z0-9_-]*", m))})


def _module_code(folder: Path) -> str:
    """The module's `code:` (what installed paths use: `_bmad/bmm/`), else the folder's name."""
    try:
        data = safe_yaml.load((folder / "module.yaml").read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return folder.name
    code = data.get("code") if isinstance(data, dict) else None
    return code if isinstance(code, str) and re.fullmatch(r"[a-z0-9][a-z0-9_-]*", code) else folder.name


def _alias_sidecars(source: BmadSource) -> None:
    """An installer copies `<agent dir>/<name>-sidecar/` to `_memory/<name>-sidecar/`; so does the import."""
    for rel in list(source.files):
        parts = rel.split("/")
        for i, part in enumerate(parts[:-1]):
            if part.endswith("-sidecar"):
                source.aliases["/".join(["_memory", *parts[i:]])] = source.aliases.get(rel, rel)
                break
