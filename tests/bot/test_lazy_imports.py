"""A bot that does not use a part does not load it: idle memory stays near a bare Bolt app's.

Postgres (psycopg), RE2, the model SDK and the MCP SDK load when a replica, a search, a model call or
an MCP server first needs them (see bench/memory.py for the RSS figures).
"""

from __future__ import annotations

import json
import subprocess
import sys
from tests.support.paths import REPO

HEAVY = ("psycopg", "psycopg_pool", "re2", "openai", "mcp", "crewagent.core.bmad_import")


def test_starting_serve_in_one_process_loads_no_optional_part() -> None:
    probe = (
        "import json, sys\n"
        "import cli.serve_cmd, cli.main\n"
        "print(json.dumps(sorted({m for m in sys.modules if m.split('.')[0] in %r or m.startswith('crewagent.core.bmad_import')})))\n"
        % (HEAVY,)
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
