"""`crewagent run` and `crewagent runs` end to end: real CLI, real openai client, scripted model."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from crewagent.core.store.run_manager import RunManager
from crewagent.core.store.files import RuntimeStore
from crewagent.core.store.run_index import INDEX_FILE, JOURNAL_FILE
from tests.support.cli_driver import cli
from tests.support.fakes.llm_server import Reply, ScriptedLLM
from tests.support.processes import Spawner
from tests.support.scripts import (
    EXAMPLES,
    FORM_WIDGET,
    STORY_KEY,
    create_story_responder,
    script_create_story,
    script_hello_branch,
)

REPO = EXAMPLES.parent


@pytest.fixture
def model_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CREWAGENT_MODEL", "scripted")


async def test_run_create_story_in_the_terminal(project: Path, model_env: None, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    async with ScriptedLLM() as llm:
        monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
        script_create_story(llm)
        code, out, err = await cli(
            ["run", str(EXAMPLES / "create-story-micro"), "--project", str(project)], STORY_KEY + "\n",
            monkeypatch, capsys,
        )
    assert code == 0, err
    assert "▶ Select story [step-01-select-story] — Bob (Scrum Master)" in out
    assert "▶ Summary [end-99] — Sam (Summarizer)" in out
    assert "Which story should I prepare?" in out
    assert "  ✎ wrote artifacts/stories/1-2-user-authentication.md" in out
    tail = out.split("Run complete.")[1]
    assert "Artifacts:\n  - artifacts/create-story/target.md" in tail
    assert tail.count("  - artifacts/") == 6
    assert "Traceback" not in out + err


async def test_widgets_are_answered_by_typing(project: Path, model_env: None, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    async with ScriptedLLM() as llm:
        monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
        script_hello_branch(llm)
        code, out, err = await cli(
            ["run", str(EXAMPLES / "hello-branch"), "--project", str(project)], "7\nx\n1\n", monkeypatch, capsys
        )
    assert code == 0, err
    assert "? Is this a new system (greenfield)" in out
    assert "  1. Greenfield — New system, built from scratch" in out
    assert out.count("Please type a number between 1 and 2.") == 2
    assert (project / "artifacts/plan-greenfield.md").is_file()


async def test_end_of_input_leaves_the_run_resumable(project: Path, model_env: None,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    async with ScriptedLLM() as llm:
        monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
        script_create_story(llm)
        code, out, _ = await cli(
            ["run", str(EXAMPLES / "create-story-micro"), "--project", str(project)], "", monkeypatch, capsys
        )
        assert code == 3  # the run is not done
        run_id = RunManager(RuntimeStore()).list()[0].run_id
        assert f"Input ended while run {run_id} waits for you; it is not done." in out
        assert f"Continue it with: crewagent run --resume {run_id}" in out

        code, out, err = await cli(["runs", "list"], "", monkeypatch, capsys)
        assert code == 0
        header, row = out.splitlines()
        assert header.split() == ["RUN", "ID", "PROJECT", "WORKFLOW", "PHASE", "CURRENT", "NODE", "STEPS",
                                  "ARTIFACTS", "CALLS", "TOKENS", "UPDATED"]
        assert row.split()[:9] == [run_id, project.name, "create-story-micro", "waiting-user",
                                   "step-01-select-story", "0/6", "0", "2", f"{saved_tokens(run_id):,}"]

        code, out, err = await cli(["run", "--resume", run_id], STORY_KEY + "\n", monkeypatch, capsys)
        assert code == 0, err
        assert f"Resuming run {run_id}" in out and "Run complete." in out

        calls = RunManager(RuntimeStore()).get(run_id).usage.llm_calls
        assert calls == len(llm.requests)
        assert f"Run complete. {calls} model calls · {saved_tokens(run_id):,} tokens." in out

        code, out, _ = await cli(["runs", "show", run_id], "", monkeypatch, capsys)
        assert "Phase:     completed" in out and "Progress:  6/6 steps" in out
        assert f"Usage:     {calls} model calls · {saved_tokens(run_id):,} tokens" in out
        assert "  - artifacts/create-story/summary.md" in out
        code, out, _ = await cli(["runs", "list", "--project", str(project / "artifacts")], "", monkeypatch, capsys)
        assert "No runs yet" in out


async def test_a_form_answer_that_breaks_the_schema_is_asked_again_and_the_run_gets_the_typed_one(
    project: Path, model_env: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async with ScriptedLLM() as llm:
        monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
        llm.add_reply(tool_calls=[("ui_ask_user", FORM_WIDGET)])
        llm.add_reply("Thanks, Nest with 2 people.")
        llm.add_reply("Say when I should go on.")  # after the runtime's one nudge to move the step on
        typed = '{"name": "Nest", "team_size": 0}\n{"name": "Nest", "team_size": 2}\n'
        code, out, err = await cli(
            ["run", str(EXAMPLES / "hello-branch"), "--project", str(project)], typed, monkeypatch, capsys
        )
        assert code == 3, err  # answered, then the input ended while the run waits for the next reply
        assert ("That answer cannot be used: team_size: 0 is less than the minimum of 1. "
                "The question is still open.") in out
        assert "Thanks, Nest with 2 people." in out
        sent = [m["content"] for m in llm.requests[1]["messages"] if m["role"] == "user"]
        assert sent[-1].endswith('\nWIDGET_SUBMIT\n{"widgetId": "project_details", "type": "form", '
                                 '"value": {"name": "Nest", "team_size": 2}}')


def saved_tokens(run_id: str) -> int:
    return RunManager(RuntimeStore()).get(run_id).usage.total_tokens


async def test_missing_model_is_a_clear_error(project: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = await cli(
        ["run", str(EXAMPLES / "hello-branch"), "--project", str(project)], "", monkeypatch, capsys
    )
    assert code == 2
    assert err.startswith("error: No model is configured. Set CREWAGENT_MODEL")
    assert "Traceback" not in err
    assert RunManager(RuntimeStore()).list() == []


async def test_bad_package_lists_the_problems(tmp_path: Path, project: Path, model_env: None,
                                              monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "bmad.json").write_text('{"schemaVersion": "1.1", "name": "x"}')
    code, out, err = await cli(["run", str(broken), "--project", str(project)], "", monkeypatch, capsys)
    assert code == 2
    assert err.startswith(f"error: {broken} is not a valid package:")
    assert "bmad.json" in err and "Traceback" not in err


async def test_unknown_run_and_unknown_agent(project: Path, model_env: None, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = await cli(["run", "--resume", "nope"], "", monkeypatch, capsys)
    assert code == 2 and "No run with id 'nope'" in err
    code, _, err = await cli(
        ["run", str(EXAMPLES / "hello-branch"), "--agent", "ghost", "--project", str(project)], "", monkeypatch, capsys
    )
    assert code == 2 and "has no agent 'ghost'" in err
    code, _, err = await cli(["runs", "show", "nope"], "", monkeypatch, capsys)
    assert code == 2 and "No run with id 'nope'" in err


async def test_ctrl_c_stops_between_turns_with_a_resume_hint(project: Path, tmp_path: Path, spawn: Spawner) -> None:
    async with ScriptedLLM() as llm:
        model = create_story_responder()
        release = asyncio.Event()

        async def respond(body: dict[str, Any]) -> Reply:
            if len(llm.requests) == 2:
                await release.wait()  # hold the second call until Ctrl-C
            return model(body)

        llm.responder = respond
        env = {**os.environ, "CREWAGENT_MODEL": "scripted", "OPENAI_BASE_URL": llm.base_url,
               "PYTHONPATH": str(REPO)}
        proc = await spawn(
            sys.executable, "-m", "crewagent.cli", "run", str(EXAMPLES / "create-story-micro"), "--project", str(project),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env=env, cwd=str(REPO),
        )
        try:
            await llm.wait_for_requests(2, timeout=60)  # a fresh interpreter starts slowly on a busy machine
            proc.send_signal(signal.SIGINT)
            out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
        finally:
            release.set()
    text = out.decode()
    run_id = RunManager(RuntimeStore()).list()[0].run_id
    assert proc.returncode == 130, err.decode()
    assert f"Stopped. Run {run_id} is saved and can continue later: crewagent run --resume {run_id}" in text
    assert "Traceback" not in text + err.decode()
    saved = RunManager(RuntimeStore()).get(run_id)
    assert saved.phase.value == "waiting-user" and saved.paused
    home = RuntimeStore().home  # a clean stop folds the run index: an earlier release reads runs-index.json only
    assert (home / JOURNAL_FILE).read_text() == ""
    assert [item["run_id"] for item in json.loads((home / INDEX_FILE).read_text())["runs"]] == [run_id]


def answers(*lines: str):  # noqa: ANN201 - a tiny stdin stand-in
    queue = list(lines)
    return lambda prompt: queue.pop(0) if queue else None


def test_widgets_typed_answers() -> None:
    from crewagent.cli.render import InputClosed, ask_widget

    shown: list[str] = []
    confirm = {"widgetId": "c", "type": "confirmation", "message": "Overwrite?"}
    assert ask_widget(confirm, answers("maybe", "y"), shown.append) == {"confirmed": True}
    assert "Please answer y or n." in shown
    assert ask_widget(confirm, answers("no"), shown.append) == {"confirmed": False}

    multi = {"widgetId": "m", "type": "selection", "message": "Pick", "multi": True,
             "options": [{"value": "a", "label": "A"}, {"value": "b", "label": "B"}, {"value": "c", "label": "C"}]}
    assert ask_widget(multi, answers("3, 1"), shown.append) == ["c", "a"]

    actions = {"widgetId": "x", "type": "action_selection", "message": "Next?",
               "actions": [{"id": "go", "label": "Go"}, {"id": "stop", "label": "Stop"}]}
    assert ask_widget(actions, answers("2"), shown.append) == "stop"

    form = {"widgetId": "f", "type": "form", "message": "Details",
            "schema": {"type": "object", "required": ["name", "size"],
                       "properties": {"name": {"type": "string"}, "size": {"type": "integer"},
                                      "tier": {"enum": ["free", "pro"]}, "beta": {"type": "boolean"}}}}
    assert ask_widget(form, answers("Nest", "big", "3", "gold", "pro", "yes"), shown.append) == {
        "name": "Nest", "size": 3, "tier": "pro", "beta": True}
    assert any(line.startswith("Invalid value") for line in shown)
    assert ask_widget(form, answers('{"name": "Nest", "size": 1}'), shown.append) == {"name": "Nest", "size": 1}
    assert ask_widget(form, answers("", "Nest", "2", "", ""), shown.append) == {"name": "Nest", "size": 2}
    assert "This field is required." in shown

    review = {"widgetId": "r", "type": "plan_review", "message": "Review", "planContent": "# Plan"}
    assert ask_widget(review, answers("n", "smaller scope"), shown.append) == {
        "decision": "request_changes", "feedback": "smaller scope"}
    with pytest.raises(InputClosed):
        ask_widget(confirm, answers(), shown.append)


async def test_a_reader_that_goes_away_leaves_the_run_saved_not_running(
    project: Path, tmp_path: Path, spawn: Spawner
) -> None:
    """`crewagent run … | head -3`: once head has its lines, the next write finds the pipe closed; the run
    stops between turns, saved and resumable, instead of being cut off and left `running`."""
    async with ScriptedLLM() as llm:
        model = create_story_responder()
        release = asyncio.Event()

        async def respond(body: dict[str, Any]) -> Reply:
            if len(llm.requests) == 2:
                await release.wait()  # hold the second call until head has gone
            return model(body)

        llm.responder = respond
        env = {**os.environ, "CREWAGENT_MODEL": "scripted", "OPENAI_BASE_URL": llm.base_url,
               "PYTHONPATH": str(REPO)}
        read_end, write_end = os.pipe()
        proc = await spawn(
            sys.executable, "-m", "crewagent.cli", "run", str(EXAMPLES / "create-story-micro"), "--project", str(project),
            stdin=asyncio.subprocess.DEVNULL, stdout=write_end, stderr=asyncio.subprocess.PIPE, env=env, cwd=str(REPO),
        )
        head = await spawn("head", "-3", stdin=read_end, stdout=asyncio.subprocess.PIPE)
        os.close(read_end)
        os.close(write_end)
        try:
            shown, _ = await asyncio.wait_for(head.communicate(), timeout=60)
            await llm.wait_for_requests(2, timeout=60)
        finally:
            release.set()
        _, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert len(shown.decode().splitlines()) == 3
    assert proc.returncode == 141 and "Traceback" not in err.decode(), err.decode()
    [saved] = RunManager(RuntimeStore()).list()
    assert saved.phase.value == "waiting-user" and saved.paused
