"""`crewagent` command line: wires core (and bot) together; no engine logic lives here."""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from contextvars import ContextVar
from importlib import import_module
from importlib.metadata import PackageNotFoundError, version

from .reader_gone import discard_stdout
from .exit_codes import EXIT_BROKEN_PIPE, EXIT_INTERRUPTED, SEE_TABLE, TABLE

DISTRIBUTION = "crewagent-slack"
VERBOSE_HELP = "also show the log (model calls, retries, tracebacks) on stderr"


DESCRIPTION = """\
Run AI agents and their step-by-step workflows from .bmad packages: in Slack threads (serve) or
in this terminal (chat, run). An agent has a persona and a menu; a workflow is a graph of steps
that a model (any OpenAI-compatible endpoint) works through, asking you when it needs input and
writing its results under artifacts/ in a project folder."""

def _command(sub: argparse._SubParsersAction, name: str, summary: str, description: str) -> argparse.ArgumentParser:
    """A subcommand whose one-line summary is listed by `crewagent --help` and whose own --help explains it."""
    return sub.add_parser(
        name, help=summary, description=textwrap.fill(description, 78), epilog=SEE_TABLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def _add_serve(sub: argparse._SubParsersAction) -> None:
    """`crewagent serve`: the Slack bot."""
    s = _command(sub, "serve", "run the Slack bot", "Run the Slack bot: it answers mentions and DMs with the "
                 "packages' agents and runs their workflows in threads. Needs SLACK_BOT_TOKEN and SLACK_APP_TOKEN "
                 "(Socket Mode) or SLACK_SIGNING_SECRET (HTTP mode), and CREWAGENT_MODEL.")
    s.add_argument("--project", help="project checkout the workflows work on (default: CREWAGENT_PROJECT, else "
                   "`project:` in --config, else the current dir)")
    s.add_argument(
        "--package",
        action="append",
        default=[],
        help="package dir or .bmad (repeatable). Without it (and without packages in --config) serve offers the "
        "example packages found in ./examples or in the source checkout crewagent runs from; an installed copy "
        "started elsewhere has none and stops, asking for --package",
    )
    s.add_argument("--config", help="crewagent.yml with channel bindings, model, limits, access (default: "
                   "CREWAGENT_CONFIG; `crewagent config schema` describes the file)")
    s.add_argument(
        "--port", type=int, default=3000, help="HTTP port: Slack events (HTTP mode) and GET /healthz (default 3000)"
    )
    s.add_argument(
        "--host", help="address the HTTP port listens on (default: `host:` in --config, else 0.0.0.0: every interface)"
    )
    s.add_argument(
        "--log-format", choices=("text", "json"),
        help="log lines: readable text (default) or one JSON object per line (also: CREWAGENT_LOG_FORMAT)",
    )
    s.set_defaults(module="crewagent.cli.serve_cmd")


def _add_migrate(sub: argparse._SubParsersAction) -> None:
    """`crewagent migrate`: copy the embedded store into a shared Postgres database."""
    m = _command(sub, "migrate", "copy the embedded store (CREWAGENT_HOME) into a Postgres database",
                 "Copy this machine's runs and conversations (CREWAGENT_HOME) into the Postgres database that "
                 "several bot replicas will share. Stop the bot first.")
    m.add_argument("--to", required=True, metavar="postgresql://…", help="the database the replicas will share")
    m.set_defaults(module="crewagent.cli.migrate_cmd")


def _add_package_checks(sub: argparse._SubParsersAction) -> None:
    """`crewagent validate` and `crewagent pack`: check and zip a package."""
    v = _command(sub, "validate", "check a package directory or .bmad file, or a crewagent.yml",
                 "Check a package against the .bmad v1.1 schemas and its graph rules; every problem is "
                 "printed with its file, place and a fix. A BMAD-METHOD source tree (src/) or an installed "
                 "_bmad/ folder is not a package yet: turn it into one with `crewagent import bmad`.")
    v.add_argument("path", metavar="PACKAGE", help="package directory (holding bmad.json) or .bmad file, or a crewagent.yml to check as serve would")
    v.set_defaults(module="crewagent.cli.package_cmd", action="validate")

    k = _command(sub, "pack", "zip a package directory into a .bmad file",
                 "Validate a package directory, then zip it into one .bmad file (nothing is written if it "
                 "has errors).")
    k.add_argument("path", metavar="DIR", help="package directory (holding bmad.json)")
    k.add_argument("-o", "--output", required=True, metavar="NAME.bmad", help="the file to write")
    k.set_defaults(module="crewagent.cli.package_cmd", action="pack")


def _add_run(sub: argparse._SubParsersAction) -> None:
    """`crewagent run`: one workflow in the terminal."""
    r = _command(sub, "run", "run one workflow in the terminal",
                 "Start one workflow of a package straight away (or continue a saved run) and work through "
                 "it here: questions are asked on the terminal and answered by typing, Ctrl-C stops between "
                 "turns and keeps the run. The run writes its files in the project folder (--project, default "
                 "the current directory); it says where before it starts.")
    r.add_argument("path", nargs="?", metavar="PACKAGE", help="package directory or .bmad file")
    r.add_argument("--project", metavar="DIR",
                   help="the folder the workflow reads and writes (default: the current directory)")
    r.add_argument("--workflow", metavar="ID", help="which workflow (default: the package's entry workflow)")
    r.add_argument("--agent", metavar="ID", help="the agent whose persona runs it (default: the workflow's own)")
    r.add_argument("--resume", metavar="RUN_ID", help="continue a saved run (a unique start of its id is enough)")
    r.add_argument(
        "--token-budget",
        type=int,
        metavar="TOKENS",
        help="pause the run before it uses more model tokens than this (default: CREWAGENT_RUN_TOKEN_BUDGET, "
        "else no limit)",
    )
    r.add_argument("-v", "--verbose", action="store_true", help=VERBOSE_HELP)
    r.add_argument("--config", help="crewagent.yml: model, tool policy and MCP servers, as for serve")
    r.set_defaults(module="crewagent.cli.run_cmd")


def _add_deliver(sub: argparse._SubParsersAction) -> None:
    """`crewagent deliver`: commit and push a completed run."""
    d = _command(sub, "deliver", "commit a completed run's changes on its branch and push it (git projects)",
                 "In a git project every run works on a branch of its own. Commit the completed run's changes "
                 "on that branch and push it, as the Commit & push button does in Slack.")
    d.add_argument("run_id", metavar="RUN_ID", help="the run (a unique start of its id is enough)")
    d.add_argument("--author", help='commit author as "Name <email>" (default: git\'s own identity)')
    d.set_defaults(module="crewagent.cli.deliver_cmd")


def _add_runs(sub: argparse._SubParsersAction) -> None:
    """`crewagent runs list|show|fold`: inspect saved runs, fold the run index."""
    rs = _command(sub, "runs", "list saved runs, or show one",
                  "Inspect the runs kept under CREWAGENT_HOME, or those replicas share in Postgres: project, phase, "
                  "step, model calls and tokens.")
    rsub = rs.add_subparsers(dest="runs_action", required=True, metavar="ACTION")
    rl = _command(rsub, "list", "list runs, newest first", "List runs, newest first: id, project, workflow, phase, "
                  "current step, progress, files written, model calls and tokens.")
    rl.add_argument("--project", metavar="DIR", help="only runs of this project")
    rsh = _command(rsub, "show", "show one run", "Show one run in full, with the question it waits on if it waits.")
    rsh.add_argument("run_id", metavar="RUN_ID", help="the run (a unique start of its id is enough)")
    _command(rsub, "fold", "fold the run index's journal into runs-index.json",
             "Fold the runs saved since the run index was last rewritten (runs-index.journal) into "
             "runs-index.json, the only file an earlier release reads. A clean stop of serve, run, chat or "
             "deliver does this by itself; run it after one was killed, before going back to an earlier "
             "release, or while this release runs beside an earlier one on the same CREWAGENT_HOME. Safe while "
             "the bot runs.")
    for parser in (rl, rsh):
        parser.add_argument("--database-url", metavar="postgresql://…", help="the runs the replicas share in this "
                            "database (default: CREWAGENT_DATABASE_URL; without either, those under CREWAGENT_HOME)")
    rs.set_defaults(module="crewagent.cli.runs_cmd")


def _add_operator_reports(sub: argparse._SubParsersAction) -> None:
    """`crewagent usage` and `crewagent audit`: the operator log."""
    database = ("the operator log the replicas share in this database (default: CREWAGENT_DATABASE_URL; without "
                "either, the one under CREWAGENT_HOME)")
    since = "only what happened since then: a date (2026-01-31, UTC), a time (2026-01-31T09:00Z) or an age (7d, 12h)"
    u = _command(sub, "usage", "model tokens used, per user or channel",
                 "Sum every model call's tokens (as the endpoint reported them) per Slack user (or terminal login) "
                 "or per channel.")
    u.add_argument("--by", choices=("user", "channel"), default="user", help="group by user (default) or channel")
    a = _command(sub, "audit", "who approved, confirmed, delivered or was refused, and when",
                 "List the operator's audit: approvals and denials of commands and tools, Confirms of state "
                 "changes, deliveries (Commit & push) and budget refusals, with the Slack user and the time.")
    a.add_argument("--run", metavar="RUN_ID", help="only this run's entries")
    a.add_argument("--user", metavar="USER", help="only this Slack user's (or terminal login's) entries")
    for parser in (u, a):
        parser.add_argument("--since", metavar="WHEN", help=since)
        parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
        parser.add_argument("--database-url", metavar="postgresql://…", help=database)
        parser.set_defaults(module="crewagent.cli.operator_cmd")


def _add_chat(sub: argparse._SubParsersAction) -> None:
    """`crewagent chat`: the agents' conversation in the terminal."""
    c = _command(sub, "chat", "talk to a package's agents in the terminal",
                 "The Slack conversation in a terminal: pick an agent, pick items from its menu (a workflow "
                 "item starts a run), answer its questions by typing. Type *help for the commands, *quit to "
                 "leave.")
    c.add_argument("path", nargs="?", metavar="PACKAGE",
                   help="package directory or .bmad file (default: examples/create-story-micro)")
    c.add_argument("--project", metavar="DIR",
                   help="the folder runs read and write (default: a scratch folder under CREWAGENT_HOME; "
                   "it says where)")
    c.add_argument("-v", "--verbose", action="store_true", help=VERBOSE_HELP)
    c.add_argument("--config", help="crewagent.yml: model, tool policy and MCP servers, as for serve")
    c.set_defaults(module="crewagent.cli.chat_cmd")


def _add_import(sub: argparse._SubParsersAction) -> None:
    """`crewagent import bmad`: turn other formats into a package."""
    imp = _command(sub, "import", "turn other formats into a .bmad package",
                   "Turn agents and workflows kept in another format into a package this tool runs.")
    kinds = imp.add_subparsers(dest="import_kind", required=True, metavar="FORMAT")
    b = _command(kinds, "bmad", "import a BMAD v6 source tree (src/) or an installed _bmad/ folder",
                 "Import BMAD-METHOD v6.0 to v6.11+ agents, workflows (step-file and classic) and skills as one "
                 "package; the layout is detected, and IMPORT-REPORT.md names it and says what was mapped and "
                 "what was left out. Nothing is written unless the result validates.")
    b.add_argument("path", help="BMAD src/ folder, _bmad/ folder, or a project that holds _bmad/")
    b.add_argument("-o", "--output", required=True, metavar="OUT",
                   help="OUT.bmad or OUT.zip (a package archive) or a folder; an existing one is replaced only "
                   "with --force")
    b.add_argument("--force", action="store_true",
                   help="replace an existing OUT archive, or a folder holding an earlier import")
    b.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                   help="override a module config value, e.g. --set user_name=Ada --set output_folder=docs/ai")
    b.add_argument("--name", help="package name (default: the module names, e.g. bmm)")
    b.add_argument("--custom", metavar="DIR",
                   help="team customizations: a folder of <skill-name>.toml overrides (BMAD's _bmad/custom/ layout); "
                        "an installed _bmad/custom/ is applied automatically, personal *.user.toml files never")
    imp.set_defaults(module="crewagent.cli.import_cmd")


def _add_config(sub: argparse._SubParsersAction) -> None:
    """`crewagent config schema`: describe crewagent.yml."""
    cfg = _command(sub, "config", "describe crewagent.yml",
                   "Describe the configuration file serve, run and chat read (--config crewagent.yml).")
    cfg_actions = cfg.add_subparsers(dest="config_action", required=True, metavar="ACTION")
    _command(cfg_actions, "schema", "print the JSON Schema of crewagent.yml",
             "Print the JSON Schema of crewagent.yml, built from the settings the bot reads, so an editor "
             "can complete and check the file (a first line `# yaml-language-server: $schema=FILE` points "
             "the YAML language server at it).")
    cfg.set_defaults(module="crewagent.cli.config_cmd")


def build_parser() -> argparse.ArgumentParser:
    """The `crewagent` command line: one subcommand per job, each with its own --help."""
    p = CommandParser(
        prog="crewagent", description=DESCRIPTION, epilog=TABLE + "\n\nMore: crewagent COMMAND --help",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"crewagent {installed_version()}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add_commands in (_add_serve, _add_migrate, _add_package_checks, _add_run, _add_deliver, _add_runs,
                         _add_operator_reports, _add_chat, _add_import, _add_config):
        add_commands(sub)
    return p


class _UsageError(Exception):
    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        super().__init__(message)
        self.parser, self.message = parser, message


_REPORTING_TO_PARSE_ARGS: ContextVar[bool] = ContextVar("reporting_to_parse_args", default=False)


class CommandParser(argparse.ArgumentParser):
    """Inside `parse_args`, reports a usage error to it (which first looks for options nobody knows)."""

    def error(self, message: str):  # type: ignore[override]
        if _REPORTING_TO_PARSE_ARGS.get():
            raise _UsageError(self, message)
        super().error(message)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse like argparse, but name unknown options and complain with the usage of the command typed."""
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    reporting = _REPORTING_TO_PARSE_ARGS.set(True)
    try:
        args, unknown = parser.parse_known_args(argv)
    except _UsageError as exc:
        unknown = _unknown_options(parser, argv)
        message = f"unrecognized arguments: {' '.join(unknown)}" if unknown else exc.message
        argparse.ArgumentParser.error(exc.parser, message)  # prints that command's usage, exits 2
    finally:
        _REPORTING_TO_PARSE_ARGS.reset(reporting)
    if unknown:
        argparse.ArgumentParser.error(_chosen_command(parser, args), f"unrecognized arguments: {' '.join(unknown)}")
    return args


def _unknown_options(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """Words typed as options (`--bogus`, `-x`) that no command knows."""
    known: set[str] = set()
    pending = [parser]
    while pending:
        current = pending.pop()
        known.update(current._option_string_actions)
        for action in current._actions:
            if isinstance(action, argparse._SubParsersAction):
                pending.extend(action.choices.values())
    return [word for word in argv if word.startswith("-") and word != "-" and word.split("=", 1)[0] not in known]


def _chosen_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The deepest (sub)command the arguments selected, e.g. the parser of `crewagent runs show`."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            name = getattr(args, action.dest, None)
            if name in action.choices:
                return _chosen_command(action.choices[name], args)
    return parser


def installed_version() -> str:
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:  # running from a checkout that was never installed
        return "(not installed)"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    module = import_module(args.module)
    if args.command in ("run", "chat"):
        from crewagent.bot.logging import setup_terminal_logging

        setup_terminal_logging(args.verbose)
    try:
        code = int(module.run(args) or 0)
        sys.stdout.flush()  # a reader that went away is found here, not in the interpreter's exit
        return code
    except KeyboardInterrupt:
        print("\nStopped.", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `crewagent import … | head`: the reader has what it wanted
        discard_stdout()
        return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
