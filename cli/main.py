"""`crewagent` command line: wires core (and bot) together; no engine logic lives here."""

from __future__ import annotations

import argparse
import sys
from importlib import import_module
from importlib.metadata import PackageNotFoundError, version

DISTRIBUTION = "crewagent-slack"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="crewagent", description="Run .bmad v1.1 agent workflows.")
    p.add_argument("--version", action="version", version=f"crewagent {installed_version()}")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("serve", help="run the Slack bot")
    s.add_argument("--project", help="project checkout the workflows work on (default: current dir)")
    s.add_argument(
        "--package",
        action="append",
        default=[],
        help="package dir or .bmad (repeatable). Without it (and without packages in --config) serve offers the "
        "example packages found in ./examples or in the source checkout crewagent runs from; an installed copy "
        "started elsewhere has none and stops, asking for --package",
    )
    s.add_argument("--config", help="crewagent.yml with channel bindings, model, limits, access")
    s.add_argument(
        "--port", type=int, default=3000, help="HTTP port: Slack events (HTTP mode) and GET /healthz (default 3000)"
    )
    s.add_argument(
        "--host", help="address the HTTP port listens on (default: `host:` in --config, else 0.0.0.0: every interface)"
    )
    s.set_defaults(module="cli.serve_cmd")

    m = sub.add_parser("migrate", help="copy the embedded store (CREWAGENT_HOME) into a Postgres database")
    m.add_argument("--to", required=True, metavar="postgresql://…", help="the database the replicas will share")
    m.set_defaults(module="cli.migrate_cmd")

    v = sub.add_parser("validate", help="check a package directory or .bmad file")
    v.add_argument("path")
    v.set_defaults(module="cli.package_cmd", action="validate")

    k = sub.add_parser("pack", help="zip a package directory into a .bmad file")
    k.add_argument("path")
    k.add_argument("-o", "--output", required=True)
    k.set_defaults(module="cli.package_cmd", action="pack")

    r = sub.add_parser("run", help="run a workflow in the terminal (Workflow-First)")
    r.add_argument("path", nargs="?", help="package dir or .bmad")
    r.add_argument("--project", help="project checkout (default: current dir)")
    r.add_argument("--workflow", help="workflow id (multi-workflow packages)")
    r.add_argument("--agent", help="agent id for the persona")
    r.add_argument("--resume", metavar="RUN_ID", help="continue a saved run (a unique start of its id is enough)")
    r.add_argument(
        "--token-budget",
        type=int,
        metavar="TOKENS",
        help="pause the run before it uses more model tokens than this (default: CREWAGENT_RUN_TOKEN_BUDGET, "
        "else no limit)",
    )
    r.set_defaults(module="cli.run_cmd")

    d = sub.add_parser("deliver", help="commit a completed run's changes on its branch and push it (git projects)")
    d.add_argument("run_id")
    d.add_argument("--author", help='commit author as "Name <email>" (default: git\'s own identity)')
    d.set_defaults(module="cli.deliver_cmd")

    rs = sub.add_parser("runs", help="inspect runs")
    rsub = rs.add_subparsers(dest="runs_action", required=True)
    rl = rsub.add_parser("list", help="list runs")
    rl.add_argument("--project", help="only runs of this project")
    rsh = rsub.add_parser("show", help="show one run")
    rsh.add_argument("run_id")
    rs.set_defaults(module="cli.runs_cmd")

    c = sub.add_parser("chat", help="talk to a package's agents in the terminal (Agent-First)")
    c.add_argument("path", nargs="?", help="package dir or .bmad")
    c.add_argument("--project", help="project checkout (default: a scratch folder under the runtime home)")
    c.set_defaults(module="cli.chat_cmd")

    imp = sub.add_parser("import", help="turn other formats into a .bmad package")
    kinds = imp.add_subparsers(dest="import_kind", required=True)
    b = kinds.add_parser("bmad", help="import a BMAD v6 source tree (src/) or an installed _bmad/ folder",
                         description="Import BMAD-METHOD v6.0 to v6.11+ agents, workflows and skills as one package; "
                                     "the layout is detected and named in IMPORT-REPORT.md.")
    b.add_argument("path", help="BMAD src/ folder, _bmad/ folder, or a project that holds _bmad/")
    b.add_argument("-o", "--output", required=True, help="OUT.bmad (archive) or a directory")
    b.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                   help="override a module config value, e.g. --set user_name=Ada --set output_folder=docs/ai")
    b.add_argument("--name", help="package name (default: the module names, e.g. bmm)")
    b.add_argument("--custom", metavar="DIR",
                   help="team customizations: a folder of <skill-name>.toml overrides (BMAD's _bmad/custom/ layout); "
                        "an installed _bmad/custom/ is applied automatically, personal *.user.toml files never")
    imp.set_defaults(module="cli.import_cmd")
    return p


def installed_version() -> str:
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:  # running from a checkout that was never installed
        return "(not installed)"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    module = import_module(args.module)
    try:
        return int(module.run(args) or 0)
    except KeyboardInterrupt:
        print("\nStopped.", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
