"""Imported BMAD v6.2 and v6.11 packages where a team uses them: `crewagent run` / `chat` in a terminal and a Slack thread.

The real BMAD-METHOD v6.11.0 tree is read in place from ../shared/fixtures; the tests skip, saying so,
when it is absent.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from crewagent.cli.main import main
from tests.support.bmad_trees import BMAD_V6_SRC as V60
from tests.support.bmad_trees import BMAD_V62_SRC as V62
from tests.support.bmad_trees import BMAD_V611_SRC as V611
from tests.support.bmad_trees import installed_bmad
from tests.support.bmad_walker import walker
from tests.support.fakes.llm_server import ScriptedLLM
from tests.support.shared_files import require
from tests.support.bot_harness import bot_harness, element_text, elements, is_status, message_text
from tests.support.cli_driver import cli

pytestmark = pytest.mark.slow  # real BMAD workflows end to end in the terminal and a Slack thread


def _imported(tmp_path_factory: pytest.TempPathFactory, tree: Path, name: str) -> Path:
    require(tree)
    out = tmp_path_factory.mktemp(name) / "team.bmad"
    assert main(["import", "bmad", str(tree), "-o", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def v611_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _imported(tmp_path_factory, V611, "v611")


@pytest.fixture(scope="module")
def v60_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _imported(tmp_path_factory, V60, "v60")


@pytest.fixture(scope="module")
def v62_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _imported(tmp_path_factory, V62, "v62")


async def _run_in_terminal(package: Path, project: Path, workflow: str, monkeypatch: pytest.MonkeyPatch,
                           capsys: pytest.CaptureFixture[str]) -> str:
    monkeypatch.setenv("CREWAGENT_MODEL", "scripted")
    async with ScriptedLLM(responder=walker()) as llm:
        monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
        code, out, err = await cli(["run", str(package), "--project", str(project), "--workflow", workflow],
                                   "", monkeypatch, capsys)
    assert code == 0, err
    assert "▶ Finish [end]" in out and "Run complete" in out
    return out


@pytest.mark.parametrize("workflow", ["create-story", "dev-story", "code-review", "sprint-planning", "prd"])
async def test_implementation_skills_run_from_the_terminal(
        v611_package: Path, project: Path, workflow: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    await _run_in_terminal(v611_package, project, workflow, monkeypatch, capsys)


@pytest.mark.parametrize(("workflow", "first_step"), [
    ("create-prd", "step-01-"), ("code-review", "step-01-"),  # step-file skills
    ("create-story", "[step-1]"), ("dev-story", "[step-1]"), ("sprint-planning", "[step-1]"),  # classic XML skills
])
async def test_v62_workflows_run_from_the_terminal(
        v62_package: Path, project: Path, workflow: str, first_step: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    out = await _run_in_terminal(v62_package, project, workflow, monkeypatch, capsys)
    assert first_step in out


@pytest.mark.parametrize("workflow", ["create-prd", "create-story"])
async def test_v60_planning_and_implementation_run_from_the_terminal(
        v60_package: Path, project: Path, workflow: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    await _run_in_terminal(v60_package, project, workflow, monkeypatch, capsys)


async def test_chat_menu_of_an_imported_agent_routes_a_phrase(
        v611_package: Path, project: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CREWAGENT_MODEL", "scripted")
    async with ScriptedLLM(responder=walker()) as llm:
        monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
        code, out, err = await cli(["chat", str(v611_package), "--project", str(project)],
                                   "Amelia\nreview my code\n", monkeypatch, capsys)
    assert code in (0, 3), err
    assert "CR or fuzzy match on code-review" not in out  # the menu shows the phrase, not the raw trigger
    assert "code-review — [CR] Initiate a comprehensive code review" in out
    assert "Code Review" in out or "code-review" in out.split("[CR]")[-1]


async def test_code_review_runs_in_a_slack_thread(v611_package: Path, project: Path) -> None:
    async with bot_harness(project, [str(v611_package)]) as h:
        h.llm.responder = walker()
        top = await h.mention("Amelia")
        await h.posted_text("[CR] Initiate a comprehensive code review")
        mark = h.mark()
        await h.reply(top, "review my code")
        done = await h.posted_text("completed.", since=mark)
        assert done["thread_ts"] == top
        final = await h.wait_status(top, "Completed")
        assert "Code Review" in message_text(final) or "code-review" in message_text(final).lower()
        assert len([m for m in h.thread(top) if is_status(m)]) == 1
        for params in h.slack.calls_to("chat.postMessage") + h.slack.calls_to("chat.update"):
            assert str(project) not in str(params)


async def test_v62_classic_create_story_runs_in_a_slack_thread(v62_package: Path, project: Path) -> None:
    async with bot_harness(project, [str(v62_package)]) as h:
        h.llm.responder = walker()
        top = await h.mention("Bob")
        await h.posted_text("Context Story")
        buttons = [element_text(e) for m in h.thread(top) for e in elements(m)]
        assert any("Context Story" in b for b in buttons)  # a classic workflow is a menu button like any other
        mark = h.mark()
        await h.reply(top, "let's write the next story")
        done = await h.posted_text("completed.", since=mark)
        assert done["thread_ts"] == top
        final = await h.wait_status(top, "Completed")
        assert "Create Story" in message_text(final) or "create-story" in message_text(final).lower()


async def test_slack_menu_says_why_an_item_is_unavailable_once(tmp_path: Path, project: Path) -> None:
    installed_bmad(tmp_path / "bmad")  # its classic `old` workflow has no <step>: it cannot be imported
    package = tmp_path / "plans.bmad"
    assert main(["import", "bmad", str(tmp_path / "bmad"), "-o", str(package)]) == 0
    async with bot_harness(project, [str(package)]) as h:
        top = await h.mention("Pat")
        menu = await h.posted_text("Old Plan")
        buttons = [element_text(e) for m in h.thread(top) for e in elements(m)]
        assert any("Make Plan" in b for b in buttons) and not any("Old Plan" in b for b in buttons)
        line = next(ln for ln in message_text(menu).splitlines() if "Old Plan" in ln)
        assert line.count("classic BMAD workflow") == 1 and "unavailable here" not in line
