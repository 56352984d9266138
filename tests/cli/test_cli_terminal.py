"""The terminal surface as a new user meets it: `crewagent chat` / `run` / `runs`, driven as real processes
(or through the CLI's own entry points), against the scripted model."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crewagent.cli import chat_cmd
from crewagent.cli.main import main
from crewagent.core.store.run_manager import RunManager
from crewagent.core.store.files import RuntimeStore
from tests.support.cli_driver import STORY, WAIT, chat, crewagent, model_env
from tests.support.fakes.llm_server import Reply, ScriptedLLM
from tests.support.linear_package import CODENAME_ANSWER, linear_responder, make_linear_package
from tests.support.scripts import (
    EXAMPLES,
    HELLO_LINEAR_ANSWER,
    STORY_KEY,
    create_story_responder,
    current_node,
    hello_branch_responder,
    hello_linear_responder,
    user_inputs,
)

pytestmark = pytest.mark.slow  # the terminal end to end in a pseudo-terminal

def held_at(call: int, responder: Any) -> tuple[asyncio.Event, asyncio.Event, Any]:
    """A responder that holds its `call`-th answer until released (the run is then mid-turn)."""
    reached, release = asyncio.Event(), asyncio.Event()
    seen = [0]

    async def respond(body: dict[str, Any]) -> Any:
        seen[0] += 1
        if seen[0] == call:
            reached.set()
            await release.wait()
        return responder(body)

    return reached, release, respond


def saved_run(home: Path) -> Any:
    (record,) = RunManager(RuntimeStore(home)).list()
    return record


# ---- *stop / *pause while the run works ------------------------------------------------------


@pytest.mark.parametrize("command", ["*stop", "*pause"])
async def test_stop_and_pause_act_between_turns_while_the_run_works(
    command: str, project: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    reached, release, respond = held_at(4, create_story_responder())  # step-02's call
    async with ScriptedLLM(responder=respond) as llm:
        async with crewagent(model_env(llm, home), "chat", str(STORY), "--project", str(project)) as cli:
            await cli.type("1\n1\n")
            await cli.until("Which story should I prepare?")
            await cli.type(f"{STORY_KEY}\n")
            await asyncio.wait_for(reached.wait(), WAIT)
            await cli.type(f"{command}\n")
            await cli.until("Stopping now" if command == "*stop" else "Pausing after the current step")
            release.set()  # a paused run finishes the turn in flight; a stopped one abandoned it
            await cli.until("the run is saved. Type *resume to continue.")
            await cli.type("*status\n")
            await cli.until("Phase:")
            await cli.type("*quit\n")
            code, out = await cli.finish()
        assert len(llm.requests) == 4  # the run went no further (it used to run on to the end)
    assert code == 0
    assert "Phase:     waiting-user (paused)" in out
    record = saved_run(home)
    assert record.paused and record.phase.value == "waiting-user"
    assert not (project / "artifacts/create-story/summary.md").exists()


# ---- Ctrl-C ---------------------------------------------------------------------------------


async def test_ctrl_c_in_chat_stops_the_run_and_says_how_to_resume(project: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    reached, release, respond = held_at(4, create_story_responder())
    async with ScriptedLLM(responder=respond) as llm:
        env = model_env(llm, home)
        async with crewagent(env, "chat", str(STORY), "--project", str(project)) as cli:
            await cli.type(f"1\n1\n{STORY_KEY}\n")
            await asyncio.wait_for(reached.wait(), WAIT)
            cli.proc.send_signal(signal.SIGINT)
            code, out = await cli.finish()
        release.set()
        record = saved_run(home)
        assert code == 130
        assert (f"Stopped. Run {record.run_id} is saved (paused); continue it with: "
                f"crewagent run --resume {record.run_id}") in out
        assert record.phase.value == "waiting-user" and record.paused  # not left "running"

        llm.responder = create_story_responder()
        async with crewagent(env, "run", "--resume", record.run_id[:8]) as cli:
            await cli.close_input()
            code, out = await cli.finish()
        assert code == 0 and "Run complete." in out


async def test_ctrl_c_at_the_prompt_names_the_waiting_run(project: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    async with ScriptedLLM(responder=create_story_responder()) as llm:
        async with crewagent(model_env(llm, home), "chat", str(STORY), "--project", str(project)) as cli:
            await cli.type("1\n1\n")
            await cli.until("Which story should I prepare?")
            cli.proc.send_signal(signal.SIGINT)
            code, out = await cli.finish()
    record = saved_run(home)
    assert code == 130
    assert f"Stopped. Run {record.run_id} is saved (waiting-user)" in out
    assert record.phase.value == "waiting-user"


# ---- what is not understood -------------------------------------------------------------------


@pytest.fixture
def scripted_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    monkeypatch.setenv("CREWAGENT_MODEL", "scripted")
    yield


async def test_unknown_commands_and_numbers_say_what_is_possible(
    project: Path, scripted_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with ScriptedLLM(responder=create_story_responder()) as llm:
        monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
        code, out = await chat(project, ["*frobnicate", "7", "1", "1", "*frobnicate now", "*quit"])
        sent = [t for body in llm.requests for t in user_inputs(body)]
    assert code == 0
    assert "I don't know the command *frobnicate. Commands: *menu, *status, *pause, *stop, *resume, *dismiss, *model, *help, *quit." in out
    assert "Or pick an agent by number or name." in out
    assert "There is no agent number 7; pick 1 to 2, or type a name." in out
    assert "To send it to the run as an answer, type it without the leading *." in out
    assert not any("frobnicate" in t for t in sent)  # never sent to the model


async def test_an_unknown_command_to_a_picked_agent_is_not_sent_to_the_model(
    project: Path, scripted_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with ScriptedLLM(responder=create_story_responder()) as llm:
        monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
        code, out = await chat(project, ["1", "*frobnicate", "*quit"])
        sent = [t for body in llm.requests for t in user_inputs(body)]
    assert code == 0
    assert "I don't know the command *frobnicate." in out
    assert "Type *menu for this agent's menu, or the text without the leading * to ask the agent." in out
    assert not any("frobnicate" in t for t in sent)


async def test_terminal_text_has_no_slack_wording_and_errors_print_once(
    project: Path, scripted_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with ScriptedLLM() as llm:
        monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
        llm.add_reply(tool_calls=[("fs_list", {"path": "@project"})])
        llm.add_reply(content="Which story should I prepare?")
        llm.add_error(400, "the request is too large for this model")  # a 400 is not retried
        code, out = await chat(project, ["1", "1", STORY_KEY, "*dismiss", "*quit"])
    assert code == 0
    assert "press Retry" not in out and "Mention me" not in out and "mention me" not in out
    assert out.count("the request is too large for this model") == 1
    assert "The run is saved: type *resume to try again." in out
    assert "It is saved: type *resume to continue it." in out


# ---- persona switch -------------------------------------------------------------------------


def asks_at_step_two() -> Any:
    """hello-linear, except the architect asks one question when step-02 starts."""
    model = hello_linear_responder()

    def respond(body: dict[str, Any]) -> Any:
        if current_node(body) == "step-02-generate" and not any("tone" in t for t in user_inputs(body)):
            return Reply(content="Which tone should the template have?")
        return model(body)

    return respond


async def test_status_and_resume_after_a_persona_switch_name_both_agents(project: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    pkg = EXAMPLES / "multi-workflows"
    async with ScriptedLLM(responder=asks_at_step_two()) as llm:
        env = model_env(llm, home)
        async with crewagent(env, "run", str(pkg), "--workflow", "hello-linear", "--agent", "analyst",
                             "--project", str(project)) as cli:
            await cli.type(f"{HELLO_LINEAR_ANSWER}\n")
            await cli.until("Which tone should the template have?")
            await cli.close_input()
            code, _ = await cli.finish()
        assert code == 3
        record = saved_run(home)

        async with crewagent(env, "chat", str(pkg), "--project", str(project)) as cli:
            await cli.type("*resume\n*status\n*quit\n")
            code, out = await cli.finish()
        assert "with Mary (Business Analyst); this step: Winston (Architect)." in out
        assert "Agent:     Mary (Business Analyst); this step: Winston (Architect)" in out

        async with crewagent(env, "run", "--resume", record.run_id) as cli:
            await cli.type("a friendly tone\n")
            await cli.close_input()
            code, out = await cli.finish()
        assert code == 0
        assert f"Resuming run {record.run_id}: Hello Linear" in out
        assert "with Mary (Business Analyst); this step: Winston (Architect)." in out


# ---- end of input ------------------------------------------------------------------------------


async def test_end_of_input_while_a_question_waits_exits_non_zero(
    project: Path, scripted_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with ScriptedLLM(responder=create_story_responder()) as llm:
        monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
        code, out = await chat(project, ["1", "1"])
        assert code == chat_cmd.EXIT_WAITING == 3
        run_id = RunManager(RuntimeStore()).list()[0].run_id
        assert f"Input ended while run {run_id} waits for you; it is not done." in out
        assert f"crewagent run --resume {run_id}" in out

        code, out = await chat(project, ["1", "1", STORY_KEY])  # done: end of input is a normal goodbye
        assert code == 0 and out.endswith("Bye.")


# ---- small things ------------------------------------------------------------------------------


def test_version_and_serve_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == "crewagent 0.1.0"
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "example packages found in ./examples or in the source checkout crewagent runs from" in text
    assert "asking for --package" in text


async def test_runs_show_takes_an_id_prefix_and_shows_the_pending_question(
    project: Path, scripted_env: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async with ScriptedLLM(responder=create_story_responder()) as llm:
        monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
        await chat(project, ["1", "1"])
    run_id = RunManager(RuntimeStore()).list()[0].run_id
    capsys.readouterr()
    assert await asyncio.to_thread(main, ["runs", "show", run_id[:6]]) == 0
    out = capsys.readouterr().out
    assert f"Run:       {run_id}" in out
    assert "Question:  There is no sprint-status.yaml in the project. Which story should I prepare?" in out
    assert "Usage:     2 model calls · " in out
    assert await asyncio.to_thread(main, ["runs", "show", "zz-not-an-id"]) == 2  # bad input
    assert "No run with id 'zz-not-an-id'" in capsys.readouterr().err


async def test_bare_chat_works_in_a_scratch_project_not_the_checkout(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    subprocess.run(["git", "init", "-q", str(checkout)], check=True, timeout=30)
    home = tmp_path / "home"
    async with ScriptedLLM(responder=create_story_responder()) as llm:
        env = model_env(llm, home)
        async with crewagent(env, "chat", str(STORY), cwd=checkout) as cli:
            await cli.type(f"1\n1\n{STORY_KEY}\n*quit\n")
            code, out = await cli.finish()
    scratch = home / "scratch"
    assert code == 0, out
    assert f"No --project given: working in the scratch project {scratch.resolve()}" in out
    assert (scratch / "artifacts/create-story/summary.md").is_file()
    assert not (checkout / "artifacts").exists()


async def test_run_token_budget_pauses_and_a_higher_one_finishes(tmp_path: Path, project: Path) -> None:
    home = tmp_path / "home"
    package = make_linear_package(tmp_path / "linear", 8)
    async with ScriptedLLM(responder=linear_responder(8)) as llm:
        env = model_env(llm, home)
        async with crewagent(env, "run", str(package), "--project", str(project), "--token-budget", "20000") as cli:
            await cli.type(f"{CODENAME_ANSWER}\n")
            await cli.close_input()
            code, out = await cli.finish()
        record = saved_run(home)
        assert code == 3
        assert "Paused before the next model call: this run has used" in out and "20,000-token budget" in out
        assert f"Continue with a higher budget: crewagent run --resume {record.run_id} --token-budget 40000" in out
        assert record.paused and record.token_budget == 20_000

        async with crewagent(env, "run", "--resume", record.run_id, "--token-budget", "1000000") as cli:
            await cli.close_input()
            code, out = await cli.finish()
        assert code == 0 and "Run complete." in out
        assert f"model calls · {saved_run(home).usage.total_tokens:,} tokens." in out


async def test_ctrl_c_while_a_question_widget_waits(project: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    async with ScriptedLLM(responder=hello_branch_responder()) as llm:
        async with crewagent(model_env(llm, home), "chat", str(EXAMPLES / "hello-branch"),
                             "--project", str(project)) as cli:
            await cli.type("1\n1\n")
            await cli.until("Is this a new system (greenfield)")
            await cli.until("2. Brownfield")
            cli.proc.send_signal(signal.SIGINT)
            code, out = await cli.finish()
    record = saved_run(home)
    assert code == 130
    assert f"Stopped. Run {record.run_id} is saved (waiting-user); continue it with:" in out
