"""A package's next steps: which workflow(s) a team usually runs after one completes (`next-steps.json`).

The BMAD importer derives them from BMAD's help catalog, so a completed run can offer its successor
(create-story → dev-story → code-review, and back to dev-story when a review asks for changes). The
file lives beside `bmad.json` rather than in it, because the v1.1 manifest allows no extra keys; a
package without it (an older import, a hand-written package) simply offers no next step.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

NEXT_STEPS_FILE = "next-steps.json"
MAX_NEXT = 5  # a completion message offers at most this many next-step buttons


class NextStep(BaseModel):
    """One workflow offered after another, with the agent that runs it."""

    model_config = ConfigDict(extra="forbid")

    workflow: str = Field(min_length=1)
    agent: str | None = None  # None: the agent that ran the previous step, or the first whose menu has it
    label: str = Field(min_length=1, max_length=75)
    back: bool = False  # a step back in the cycle (a review asked for changes), not forward


class StepLinks(BaseModel):
    model_config = ConfigDict(extra="forbid")

    workflow: str = Field(min_length=1)
    next: list[NextStep] = Field(max_length=MAX_NEXT)


class NextSteps(BaseModel):
    """The whole file: for each workflow, what may follow it."""

    model_config = ConfigDict(extra="forbid")

    schemaVersion: Literal["1.1"] = "1.1"
    source: str | None = None  # the catalog it was derived from (package-relative), for people reading it
    steps: list[StepLinks] = Field(default_factory=list)

    def after(self, workflow_id: str) -> list[NextStep]:
        return next((s.next for s in self.steps if s.workflow == workflow_id), [])

    def problems(self, workflows: set[str], agents: set[str]) -> list[tuple[str, str]]:
        """(JSON path, what is wrong) for every workflow or agent the file names that the package lacks."""
        found: list[tuple[str, str]] = []
        for i, links in enumerate(self.steps):
            if links.workflow not in workflows:
                found.append((f"$.steps[{i}].workflow", f"workflow '{links.workflow}' is not in the package"))
            for j, step in enumerate(links.next):
                where = f"$.steps[{i}].next[{j}]"
                if step.workflow not in workflows:
                    found.append((f"{where}.workflow", f"workflow '{step.workflow}' is not in the package"))
                if step.agent is not None and step.agent not in agents:
                    found.append((f"{where}.agent", f"agent '{step.agent}' is not defined in agents.json"))
        return found


def read_next_steps(root: Path) -> NextSteps | None:
    """The package's next steps, None when it has no such file. Raises ValueError when the file is broken."""
    path = root / NEXT_STEPS_FILE
    if not path.is_file():
        return None
    try:
        return NextSteps.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not valid JSON ({exc})") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ValueError(f"{where}: {first['msg']}" if where else first["msg"]) from None
