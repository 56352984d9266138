"""What `crewagent import bmad` prints: a few lines to act on; the full report stays in IMPORT-REPORT.md."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from crewagent.core.api.packages import importer

REPORT_FILE = "IMPORT-REPORT.md"
MAX_LISTED = 3  # unavailable menu items named in the terminal; the report has them all


def import_summary(report: importer.ImportReport, args: argparse.Namespace, archive: bool) -> list[str]:
    """Counts, the keys left without a value with the command that sets them, then what to run next."""
    out = shlex.quote(args.output)
    where = "a BMAD source tree" if report.layout == "source" else "a BMAD installation"
    unavailable = len(report.unavailable_items)
    lines = [
        f"Imported {report.package} {report.version} from {where} into {args.output}",
        f"  {_count(len(report.agents), 'agent')}, {_count(report.menu_items, 'menu item')} "
        f"({unavailable} unavailable), {_count(len(report.workflows), 'workflow')}, "
        f"{_count(len(report.carried), 'file')} carried, {_count(len(report.left_out), 'item')} left out",
    ]
    for agent, item in report.unavailable_items[:MAX_LISTED]:
        lines.append(f"  unavailable: {agent.id} [{item.code}] {item.target}: {item.reason or 'see the report'}")
    if unavailable > MAX_LISTED:
        lines.append(f"  and {unavailable - MAX_LISTED} more unavailable menu items: see the report")
    if report.warnings:
        lines.append(f"  {_count(len(report.warnings), 'warning')}: see the report")
    unset = [line.key for line in report.config if line.unset]
    if unset:
        names = ", ".join(unset)
        lines += [
            f"Set what the import could not know ({names}: left as {{{unset[0]}}} in every step otherwise):",
            "  " + _again(args, [f"{key}=…" for key in unset]),
        ]
    project = _project_hint(Path(args.path), report.layout)
    lines += [
        "Next:",
        f"  crewagent chat {out} --project {project}              (try it in a terminal)",
        f"  crewagent serve --package {out} --project {project}   (the Slack bot, for the team)",
        f"The full report (what was mapped, what was left out and why): {REPORT_FILE} "
        + (f"inside {args.output}" if archive else f"in {args.output}"),
    ]
    return lines


def _again(args: argparse.Namespace, more_settings: list[str]) -> str:
    """The import command as typed, with --force and the settings still to give."""
    words = ["crewagent", "import", "bmad", args.path, "-o", args.output, "--force"]
    if args.name:
        words += ["--name", args.name]
    if getattr(args, "custom", None):
        words += ["--custom", args.custom]
    for setting in [*args.settings, *more_settings]:
        words += ["--set", setting]
    return " ".join(shlex.quote(w) if "…" not in w else w for w in words)


def _project_hint(source: Path, layout: str) -> str:
    """An installation is a project already (the folder holding _bmad/); a source tree is not."""
    if layout != "source":
        folder = source.parent if source.name == "_bmad" else source
        return shlex.quote(str(folder))
    return "DIR"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"
