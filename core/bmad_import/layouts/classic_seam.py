"""The one place classic `<workflow>`-XML workflows (v6.1+ `workflow.md`) are handed to their converter.

The converter lives in `core/bmad_import/classic.py`; while it is not installed such workflows are
reported unavailable with the reason, and menu items naming them say so.
"""

from __future__ import annotations

import re

from ..config_map import ConfigMap
from ..report import ImportReport
from ..source import BmadSource
from ..step_workflows import WorkflowBuilder, WorkflowPlan, read_markdown

_XML_BODY = re.compile(r"^\s*<workflow[\s>]", re.M)
PENDING = "a classic BMAD workflow (XML steps) that this version cannot convert yet"


def is_xml_workflow(text: str) -> bool:
    """A `workflow.md` whose body is the `<workflow>` XML of a classic BMAD workflow."""
    try:
        from ..classic import is_classic_workflow_md  # type: ignore[import-not-found]
    except ImportError:
        _, body, _ = read_markdown(text)
        return _XML_BODY.search(body) is not None and "nextStepFile" not in text
    return bool(is_classic_workflow_md(text))


def plan_classic(source: BmadSource, rel: str, builder: WorkflowBuilder, config: ConfigMap,
                 report: ImportReport) -> tuple[WorkflowPlan | None, str]:
    """(the plan, "") when the classic converter made one, else (None, why it is unavailable)."""
    try:
        from ..classic import plan_classic_workflow  # type: ignore[import-not-found]
    except ImportError:
        return None, PENDING
    plan = plan_classic_workflow(source, rel, builder, config, report)
    return (plan, "") if plan is not None else (None, "its classic `<workflow>` XML could not be converted")
