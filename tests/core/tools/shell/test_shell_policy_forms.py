"""commands: policy judges what the shell will run: every form a word expands to, normalised paths,
wrappers and git's global options set aside, and command lines given to a shell as text."""

from __future__ import annotations

from pathlib import Path

import pytest

from crewagent.core.tools.shell.command_config import CommandsConfig
from crewagent.core.tools.shell.command_policy import decide
from tests.support.shell_sandbox import commands, make_bench

POLICY = CommandsConfig.model_validate({
    "default": "ask",
    "rules": [
        {"prefix": "git push", "decision": "forbid"},
        {"prefix": "git status", "decision": "allow"},
        {"prefix": "uv run @pkg/", "decision": "allow"},
        {"prefix": "python -m pytest", "decision": "allow"},
        {"prefix": "ls", "decision": "allow"},
        {"prefix": "echo", "decision": "allow"},
    ],
})

# Each line got a question or ran on the previous policy; a `git push` rule now forbids it outright.
FORBIDDEN = [
    "git pus{h,}",  # bash runs `git push pus`
    "{git,push} origin",
    "git {push,status}",
    "git ${X:-push}",
    "git ${X:+push}",
    "git ${X-push}",
    "git ${X=push}",
    'git "${X:-pu}sh"',
    "X=push; git $X",
    "git $X push",  # an unset variable vanishes
    "git ${X}push",
    "for c in status push; do git $c; done",
    "g\\it -C . pu\"sh\"",
    "git -C . push",
    "git -c alias.x=y push",
    "git --git-dir=.git --work-tree . push",
    "git --no-pager push",
    "/usr/bin/git -C . push",
    "/@project/../usr/bin/git pus{h,}",
    "command git pus{h,}",
    "env -i X=1 git pus{h,}",
    "env -S 'git -C . push'",
    "exec git -C . push",
    "nice -n 5 git pus{h,}",
    "nohup git ${X:-push}",
    "timeout -s KILL 5 git -C . push",
    "stdbuf -oL git -C . push",
    "time git pus{h,}",  # constructs bashlex does not model are still read for forbidden words
    "time git -C . push",
    "select x in a; do git -C . push; done",
    "case x in x) git pus{h,};; esac",
    "xargs git -C . push",
    "sh -c 'git -C . push'",
    'bash -c "git pus{h,}"',
    "bash -lc 'git ${X:-push}'",
    "sh -c '$1 push' sh git",
    "sh -c 'sh -c \"git -C . push\"'",
    "sh <<< 'git -C . push'",
    "bash <<< \"git pus{h,}\"",
    "eval git -C . push",
    "find . -name x -exec git -C . push \\;",
    "bash -c 'git \"$@\"' _ push",
    "bash <<EOF\ngit -C . push\nEOF\n",
    "uv run git -C . push",  # a command that runs another, unknown to the checker
    "chroot / git -C . push",
    "sudo -u x git pus{h,}",
]


@pytest.mark.parametrize("line", FORBIDDEN)
def test_every_form_a_forbidden_command_can_take_is_forbidden(line: str) -> None:
    verdict = decide(line, POLICY)
    assert (verdict.decision, verdict.rule) == ("forbid", "git push"), verdict


@pytest.mark.parametrize("line", [
    "uv run @pkg/../@project/evil.py",  # the project, not the package
    "uv run @pkg/scripts/../../@project/evil.py",
    "uv run //@pkg/../@project/evil.py",
    "uv run ./@pkg/scripts/hello.py",  # a folder named @pkg inside the project
    "uv run @pkg/..",
    "uv run @pkg/$X",  # any file at all
    "uv run @pkg/${X:-../@project/evil.py}",
])
def test_a_path_that_leaves_the_package_is_not_allowed_by_a_package_rule(line: str) -> None:
    assert decide(line, POLICY).decision == "ask"


@pytest.mark.parametrize("line", [
    "uv run @pkg/scripts/hello.py",
    "uv run /@pkg/scripts/hello.py",  # the alias as the sandbox spells it
    "uv run @pkg//scripts/./hello.py",
    "python -m pytest -k \"a or b\"",
    "echo ${HOME}",
    "ls {a,b}.txt",
    "ls {a..z}{a..z}",
    "ls @project/{src,tests}",
    "git status",
    "git -C @project/app status",
    "timeout 60 python -m pytest -q",
    "env LANG=C python -m pytest",
    "for f in a b; do python -m pytest $f; done",
])
def test_ordinary_commands_keep_their_decision(line: str) -> None:
    assert decide(line, POLICY).decision == "allow"


@pytest.mark.parametrize("line", [
    "git $X",  # $X may be push: never allowed, and no prefix allowed for the run lifts the question
    "git pu$X",
    "git \"$X\" origin",
    "git $'\\x70ush'",  # ANSI-C quoting the checker does not decode
    "git ${X:-${Y:-push}}",  # nested expansions bashlex does not model
    'git ${X:-"}"}',
    "X=status; git $X",
    "git pu*",  # a file named push in the folder makes it push
    "git [p]ush",
    "/usr/bin/gi? push",
    "timeout 5 git${IFS}push",  # $IFS splits one word into two
])
def test_an_unknown_word_where_a_forbidden_rule_goes_asks_every_time(line: str) -> None:
    verdict = decide(line, POLICY, {"git"})
    assert verdict.decision == "ask" and verdict.allow_for_run is None
    assert "git push" in verdict.reason


@pytest.mark.parametrize(("line", "why"), [
    ("xargs git status", "xargs"),  # xargs adds words from its input
    ("git -c core.pager=sh status", "-c"),  # -c changes which code git runs
    ("sh -c 'git status'", "text"),  # a command given as text is read, and asked about
    ("bash", "input"),  # a shell reading its commands from stdin
    ("echo {1..2000}", "forms"),  # more words than the checker reads
    ("echo ${A:-a}${B:-b}${C:-c}${D:-d}${E:-e}${F:-f}${G:-g}", "forms"),  # 128 forms of one word
    ("echo ${A:-a}${B:-b}${C:-c}${D:-d}${E:-e} ${F:-f}${G:-g}${H:-h}${I:-i}", "forms"),  # 512 of one command
    ("sh -c \"$CMD\"", "text"),
])
def test_what_adds_or_hides_words_asks(line: str, why: str) -> None:
    verdict = decide(line, POLICY)
    assert verdict.decision == "ask" and why in verdict.reason, verdict


def test_a_program_the_command_could_have_written_is_not_allowed_by_its_name() -> None:
    allow_pytest = CommandsConfig.model_validate({"rules": [
        {"prefix": "pytest", "decision": "allow"}, {"prefix": "./gradlew", "decision": "allow"}]})
    assert decide("pytest -q", allow_pytest).decision == "allow"
    assert decide("./pytest -q", allow_pytest).decision == "ask"  # a file in the project
    assert decide("/tmp/x/../pytest", allow_pytest).decision == "ask"
    assert decide("x/../gradlew build", allow_pytest).decision == "allow"  # a rule may name the path itself


async def test_a_forbidden_form_is_refused_by_the_tool_without_a_question(tmp_path: Path) -> None:
    bench = make_bench(tmp_path, commands(default="ask", rules=[
        {"prefix": "git push", "decision": "forbid"}, {"prefix": "uv run @pkg/", "decision": "allow"}]))
    refused = await bench.call("git pus{h,} origin main")
    assert refused.approval is None
    assert refused.result["error"]["code"] == "COMMAND_FORBIDDEN" and "git push" in refused.result["error"]["message"]
    [audited] = bench.commands_audited()
    assert audited["refused"] == "COMMAND_FORBIDDEN" and audited["rule"] == "git push"
    asked = await bench.call("uv run @pkg/../@project/evil.py")
    assert asked.approval is not None and asked.result == {}
    maybe = await bench.call("git $X", allowed_for_run=frozenset({"git"}))
    assert maybe.approval is not None and maybe.approval.allow_for_run is None
    assert "it could be 'git push', which is forbidden" in maybe.approval.message


@pytest.mark.parametrize(("word", "names"), [
    ("@pkg/../@project/evil.py", "@project/evil.py"),
    ("/@pkg/scripts/x.py", "@pkg/scripts/x.py"),
    ("//@pkg//scripts/./x.py", "@pkg/scripts/x.py"),
    ("/@project/../usr/bin/git", "/usr/bin/git"),
    ("@pkg/..", "/"),
    ("./x/../y", "./y"),
    ("./@pkg/x", "./@pkg/x"),  # a folder of the project named @pkg, not the package
    ("-C", "-C"),
])
def test_paths_are_compared_as_the_sandbox_resolves_them(word: str, names: str) -> None:
    from crewagent.core.tools.shell.command_match import normalised

    assert normalised(word) == names
