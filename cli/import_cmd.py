"""`crewagent import bmad PATH -o OUT.bmad|DIR`: bring a team's BMAD v6 agents and workflows in."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from core.bmad_import import BmadImportError, import_bmad, write_package
from core.package.problems import PackageInvalid


def add_parser(sub: argparse._SubParsersAction) -> None:
    imp = sub.add_parser("import", help="turn other formats into a .bmad package")
    kinds = imp.add_subparsers(dest="import_kind", required=True)
    b = kinds.add_parser("bmad", help="import a BMAD v6 source tree (src/) or an installed _bmad/ folder")
    b.add_argument("path", help="BMAD src/ folder, _bmad/ folder, or a project that holds _bmad/")
    b.add_argument("-o", "--output", required=True, help="OUT.bmad (archive) or a directory")
    b.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                   help="override a module config value, e.g. --set user_name=Ada --set output_folder=docs/ai")
    b.add_argument("--name", help="package name (default: the module names, e.g. bmm)")
    imp.set_defaults(module="cli.import_cmd")


def run(args: argparse.Namespace) -> int:
    try:
        overrides = _overrides(args.settings)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        result = import_bmad(Path(args.path), overrides, name=args.name)
        written = write_package(result, Path(args.output))
    except BmadImportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except PackageInvalid as exc:
        for problem in exc.errors:
            print(problem, file=sys.stderr)
        print(f"error: the imported package does not validate ({len(exc.errors)} errors); nothing was written",
              file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"error: {exc.strerror or exc}: {Path(exc.filename).name if exc.filename else ''}".rstrip(": "),
              file=sys.stderr)
        return 1
    print(result.report.markdown())
    print(f"wrote {written} (the report is IMPORT-REPORT.md inside the package)")
    return 0


def _overrides(settings: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in settings:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set expects KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out
