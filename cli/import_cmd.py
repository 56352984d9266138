"""`crewagent import bmad PATH -o OUT.bmad|DIR`: bring a team's BMAD v6 agents and workflows in."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from core.api.packages import BmadImportError, import_bmad, PackageInvalid, write_package


def run(args: argparse.Namespace) -> int:
    try:
        overrides = _overrides(args.settings)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not Path(args.path).is_dir():
        print(f"error: {args.path}: no such folder (give a BMAD src/ folder, an installed _bmad/ folder, "
              "or a project that holds _bmad/)", file=sys.stderr)
        return 2
    try:
        custom = Path(args.custom) if getattr(args, "custom", None) else None
        result = import_bmad(Path(args.path), overrides, name=args.name, custom=custom)
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
    except BrokenPipeError:
        raise  # the reader went away (`| head`): the entry point ends quietly
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
