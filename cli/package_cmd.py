"""`crewagent validate PATH` and `crewagent pack DIR -o FILE.bmad`: package checks for authors."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from crewagent.core.api.errors import CrewError
from crewagent.core.api.packages import pack_package, Package, PackageInvalid, Problem, validate_path

from .exit_codes import EXIT_FAILED, EXIT_USAGE
from .package_errors import bmad_tree_advice
from .paths import NO_SUCH

EXIT_PROBLEMS = EXIT_FAILED  # the package has problems


def run(args: argparse.Namespace) -> int:
    try:
        if args.action == "validate" and Path(args.path).suffix in (".yml", ".yaml"):
            if not Path(args.path).exists():
                print(f"error: {args.path}: {NO_SUCH}", file=sys.stderr)
                return EXIT_USAGE
            return _validate_config(Path(args.path))
        if args.action == "validate":
            return _validate(Path(args.path))
        if args.action == "pack":
            return _pack(Path(args.path), Path(args.output))
    except CrewError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return EXIT_PROBLEMS
    except BrokenPipeError:
        raise  # the reader went away (`| head`): the entry point ends quietly
    except OSError as exc:
        print(f"error: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), file=sys.stderr)
        return EXIT_USAGE
    print(f"error: unknown package action {args.action!r}", file=sys.stderr)
    return EXIT_USAGE


def summary(package: Package) -> str:
    workflows, agents = len(package.workflows), len(package.agents)
    nodes = sum(len(w.graph.nodes) for w in package.workflows)
    return (
        f"{package.name} {package.version}: {workflows} workflow{'s' * (workflows != 1)}, "
        f"{agents} agent{'s' * (agents != 1)}, {nodes} node{'s' * (nodes != 1)}"
    )


def _print_problems(problems: list[Problem], stream) -> None:
    for problem in problems:
        if problem.level == "error":
            print(problem, file=stream)
    for problem in problems:
        if problem.level == "warning":
            print(f"warning: {problem}", file=stream)


def _validate_config(path: Path) -> int:
    """A crewagent.yml: every key checked as `serve` checks it (bindings, packages, MCP servers)."""
    from crewagent.bot.config import ConfigError, load_config

    try:
        config = load_config(config_path=path)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"error: {problem}", file=sys.stderr)
        return 1
    servers = ", ".join(config.mcp_servers) or "none"
    print(f"{path}: ok ({len(config.bindings())} binding(s); MCP servers: {servers})")
    return 0


def _validate(path: Path) -> int:
    if not path.exists():
        print(f"error: {path}: {NO_SUCH}", file=sys.stderr)
        return EXIT_USAGE
    with tempfile.TemporaryDirectory(prefix="crewagent-validate-") as scratch:
        package, problems = validate_path(path, cache_dir=Path(scratch))
    if package is None:
        errors = [p for p in problems if p.level == "error"]
        if len(errors) == 1 and errors[0].code in ("PACKAGE_ARCHIVE_INVALID", "PACKAGE_TOO_LARGE"):
            print(f"error: {errors[0]}", file=sys.stderr)
            return EXIT_PROBLEMS
        advice = bmad_tree_advice(path) if len(errors) == 1 else None  # a BMAD tree: the import command
        if advice is not None:
            print(f"error: {advice}", file=sys.stderr)
            return EXIT_PROBLEMS
        _print_problems(problems, sys.stdout)
        print(f"INVALID {path}: {len(errors)} error{'s' * (len(errors) != 1)}")
        return EXIT_PROBLEMS
    print(f"OK {summary(package)}")
    _print_problems(problems, sys.stdout)
    return 0


def _pack(src: Path, out: Path) -> int:
    if not src.exists():
        print(f"error: {src}: {NO_SUCH}", file=sys.stderr)
        return EXIT_USAGE
    if not src.is_dir():
        print(f"error: {src}: not a package folder (pack zips a folder holding bmad.json)", file=sys.stderr)
        return EXIT_USAGE
    try:
        written = pack_package(src, out)
    except PackageInvalid as exc:
        advice = bmad_tree_advice(src)
        if advice is not None:
            print(f"error: {advice}", file=sys.stderr)
        else:
            _print_problems(exc.problems, sys.stderr)
            print(f"error: {src} was not packed: {len(exc.errors)} error(s)", file=sys.stderr)
        return EXIT_PROBLEMS
    print(f"{out} ({written.stat().st_size} bytes)")
    return 0
