"""A script's inline metadata (PEP 723): the `# /// script` block that names what `uv run` installs.

BMAD's scripts declare their needs this way (`sprint_plan.py`: `dependencies = ["ruamel.yaml>=0.18"]`,
`requires-python = ">=3.10"`). The block is read with the PEP's own rules and a real TOML parser, so a
script whose block `uv run` would refuse is refused here too, with the reason, before any run.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

# The reference regular expression of PEP 723 (https://peps.python.org/pep-0723/#reference-implementation).
_BLOCK = re.compile(r"(?m)^# /// (?P<type>[a-zA-Z0-9-]+)$\s(?P<content>(^#(| .*)$\s)+)^# ///$")
MAX_SCRIPT_BYTES = 1_000_000  # a script larger than this is not read for metadata


class ScriptMetadataError(ValueError):
    """The script's `# /// script` block cannot be used; the message says why (no paths)."""


class ScriptMetadata(BaseModel):
    """What a script asks of its environment. `dependencies` are PEP 508 requirement strings."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    dependencies: tuple[str, ...] = ()
    requires_python: str | None = Field(default=None, alias="requires-python")


def parse_script_metadata(text: str) -> ScriptMetadata | None:
    """The script's metadata; None when it has no `script` block; ScriptMetadataError when it is malformed."""
    blocks = [m for m in _BLOCK.finditer(text) if m.group("type") == "script"]
    if not blocks:
        if re.search(r"(?m)^# /// script\s*$", text):
            raise ScriptMetadataError("its `# /// script` block never ends with a `# ///` line")
        return None
    if len(blocks) > 1:
        raise ScriptMetadataError("it has more than one `# /// script` block")
    content = "".join(line[2:] if line.startswith("# ") else line[1:]
                      for line in blocks[0].group("content").splitlines(keepends=True))
    try:
        data = tomllib.loads(content)
    except tomllib.TOMLDecodeError as exc:
        raise ScriptMetadataError(f"its `# /// script` block is not valid TOML ({exc})") from None
    try:
        return ScriptMetadata.model_validate(data)
    except ValidationError as exc:
        where = ".".join(str(p) for p in exc.errors()[0]["loc"])
        raise ScriptMetadataError(f"its `# /// script` block has a wrong `{where}` "
                                  "(dependencies: a list of strings; requires-python: a string)") from None


def read_script_metadata(path: Path) -> ScriptMetadata | None:
    """`parse_script_metadata` of a file on disk (blocking: call it from a worker thread in the bot)."""
    with path.open("rb") as handle:
        data = handle.read(MAX_SCRIPT_BYTES + 1)
    if len(data) > MAX_SCRIPT_BYTES:
        raise ScriptMetadataError(f"it is larger than {MAX_SCRIPT_BYTES // 1_000_000} MB; its metadata is not read")
    try:
        return parse_script_metadata(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ScriptMetadataError("it is not UTF-8 text") from None
