"""`crewagent config schema`: the JSON Schema of crewagent.yml, built from the settings models.

The schema is what editors use to complete and check the file, and what the configuration page
of the documentation is generated from, so a key added to the models shows up in both by itself.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .exit_codes import EXIT_OK, EXIT_USAGE

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def config_schema() -> dict[str, Any]:
    """crewagent.yml's JSON Schema; fields the file may not set (marked `exclude`) are left out."""
    from crewagent.bot.config import FileConfig

    schema = FileConfig.model_json_schema(mode="serialization")
    return {"$schema": SCHEMA_DIALECT, "title": "crewagent.yml", **{k: v for k, v in schema.items() if k != "title"}}


def run(args: argparse.Namespace) -> int:
    if args.config_action == "schema":
        json.dump(config_schema(), sys.stdout, indent=2, ensure_ascii=False)
        sys.stdout.write("\n")
        return EXIT_OK
    print(f"error: unknown config action {args.config_action!r}", file=sys.stderr)
    return EXIT_USAGE
