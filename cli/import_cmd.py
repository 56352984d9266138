"""`crewagent import bmad PATH -o OUT.bmad|OUT.zip|DIR`: bring a team's BMAD v6 agents and workflows in."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from crewagent.core.api.packages import PackageInvalid, importer

from .exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from .import_summary import import_summary
from .paths import NO_SUCH


def run(args: argparse.Namespace) -> int:
    try:
        overrides = _overrides(args.settings)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    source = Path(args.path)
    if not source.exists():
        print(f"error: {args.path}: {NO_SUCH}", file=sys.stderr)
        return EXIT_USAGE
    if not source.is_dir():
        print(f"error: {args.path}: not a folder (give a BMAD src/ folder, an installed _bmad/ folder, "
              "or a project that holds _bmad/)", file=sys.stderr)
        return EXIT_USAGE
    custom = Path(args.custom) if getattr(args, "custom", None) else None
    if custom is not None and not custom.is_dir():
        print(f"error: --custom {args.custom}: {NO_SUCH if not custom.exists() else 'not a folder'}", file=sys.stderr)
        return EXIT_USAGE
    output = Path(args.output)
    try:
        result = importer.import_bmad(source, overrides, name=args.name, custom=custom)
        importer.write_package(result, output, replace=getattr(args, "force", False))
    except importer.OutputExists as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except importer.BmadImportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except PackageInvalid as exc:
        for problem in exc.errors:
            print(problem, file=sys.stderr)
        print(f"error: the imported package does not validate ({len(exc.errors)} errors); nothing was written",
              file=sys.stderr)
        return EXIT_FAILED
    except BrokenPipeError:
        raise  # the reader went away (`| head`): the entry point ends quietly
    except OSError as exc:
        print(f"error: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), file=sys.stderr)
        return EXIT_FAILED
    archive = output.suffix.lower() in (".bmad", ".zip")
    for line in import_summary(result.report, args, archive):
        print(line)
    return EXIT_OK


def _overrides(settings: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in settings:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set expects KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out
