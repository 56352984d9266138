"""menuItem.data loading: formats, summaries, previews and every way it can fail (alias paths only)."""

from __future__ import annotations

from pathlib import Path

import pytest

from crewagent.core.base.errors import CrewError
from crewagent.core.session.router import DataRef
from crewagent.core.session.data import PREVIEW_CHARS, data_alias, load_data
from crewagent.core.tools.base import Mounts


@pytest.fixture
def mounts(tmp_path: Path) -> Mounts:
    project, pkg = tmp_path / "project", tmp_path / "pkg"
    (project / "docs").mkdir(parents=True)
    (pkg / "assets").mkdir(parents=True)
    (project / "docs" / "team.yaml").write_text("team: TaskNest\nsprint: 4\n")
    (pkg / "assets" / "table.csv").write_text("key,status\n1-1,done\n1-2,backlog\n")
    (pkg / "assets" / "tree.xml").write_text("<root><a/><b/></root>")
    (pkg / "assets" / "bad.xml").write_text("<root><a></root>")
    (pkg / "assets" / "long.md").write_text("x" * (PREVIEW_CHARS + 100))
    (pkg / "assets" / "notes").mkdir()
    return Mounts(project=project, pkg=pkg)


@pytest.mark.parametrize(
    ("path", "parse_as", "alias", "summary"),
    [
        ("{project-root}/docs/team.yaml", "yaml", "@project/docs/team.yaml", "YAML object with 2 key(s): team, sprint"),
        ("assets/table.csv", "csv", "@pkg/assets/table.csv", "CSV with 2 data row(s); columns: key, status"),
        ("{package-root}/assets/tree.xml", "xml", "@pkg/assets/tree.xml", "XML document, root <root> with 2 child"),
        ("./assets/long.md", "text", "@pkg/assets/long.md", "text, 1 line(s)"),
    ],
)
async def test_formats_are_parsed_and_summarised(
    mounts: Mounts, path: str, parse_as: str, alias: str, summary: str
) -> None:
    loaded = await load_data(DataRef(path=path, parse_as=parse_as), mounts, max_read_bytes=100_000)  # type: ignore[arg-type]
    assert loaded.alias == alias and summary in loaded.summary
    message = loaded.message()
    assert message.startswith("Extra context (from menuItem.data):") and f"- path: {alias}" in message
    assert str(mounts.project) not in message and str(mounts.pkg) not in message
    assert loaded.truncated is (parse_as == "text")
    if loaded.truncated:
        assert len(loaded.preview) == PREVIEW_CHARS and f"fs_read({alias})" in message


@pytest.mark.parametrize(
    ("path", "parse_as", "reason"),
    [
        ("assets/bad.xml", "xml", "not valid XML"),
        ("assets/missing.json", "json", "does not exist"),
        ("assets/notes", "text", "a folder"),
        ("/etc/passwd", "text", "absolute paths are not allowed"),
        ("{config-root}/x.md", "text", "unknown template {config-root}"),
        ("{project-root}/../escape.md", "text", "outside the project and the package"),
    ],
)
async def test_failures_are_data_load_failed_without_server_paths(
    mounts: Mounts, path: str, parse_as: str, reason: str
) -> None:
    with pytest.raises(CrewError) as caught:
        await load_data(DataRef(path=path, parse_as=parse_as), mounts, max_read_bytes=100_000)  # type: ignore[arg-type]
    assert caught.value.code == "DATA_LOAD_FAILED" and reason in caught.value.message
    assert str(mounts.project) not in caught.value.message and str(mounts.pkg) not in caught.value.message


async def test_files_over_the_read_limit_load_only_the_beginning(mounts: Mounts) -> None:
    loaded = await load_data(DataRef(path="assets/table.csv", parse_as="csv"), mounts, max_read_bytes=12)
    assert loaded.truncated and "larger than the read limit" in loaded.summary and loaded.preview == "key,status\n1"


def test_alias_rules() -> None:
    assert data_alias("docs/x.md") == "@pkg/docs/x.md"
    assert data_alias("@project/docs/x.md") == "@project/docs/x.md"
    assert data_alias("{project-root}") == "@project"
