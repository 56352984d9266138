"""workflow_rewind: the one sanctioned way back, and the only one that may shrink stepsCompleted."""

from __future__ import annotations

from ..base.errors import CrewError
from ..store.runs_model import utc_now
from ..document.state import STATE_ALIAS, Draft, StateDoc, normalise, render_draft
from .args import RewindArgs
from .base import ToolContext, ToolOutcome, ok
from .guard import CONFIRM_WIDGET_ID, change_state


async def rewind(args: RewindArgs, ctx: ToolContext) -> ToolOutcome:
    if not args.confirmed:
        raise CrewError(
            "STATE_CHANGE_REQUIRES_CONFIRMATION",
            "workflow_rewind needs the user's agreement: ask with ui_ask_user (type \"confirmation\", "
            f'widgetId "{CONFIRM_WIDGET_ID}"), and once they agree call workflow_rewind again with confirmed: true.',
            {"widgetId": CONFIRM_WIDGET_ID},
        )
    moved: dict[str, list[str] | str] = {}

    def build(doc: StateDoc | None) -> Draft:
        if doc is None or doc.raw is None:
            raise CrewError("E_INVALID_FRONTMATTER", f"The current {STATE_ALIAS} cannot be read, so it cannot be rewound.")
        graph = ctx.graph
        assert graph is not None  # change_state checked it
        fm = normalise(doc.raw)
        steps = [s for s in fm["stepsCompleted"] if isinstance(s, str)]
        target = args.targetNodeId.strip()
        if graph.node(target) is None or (target != graph.entryNodeId and target not in steps):
            allowed = [graph.entryNodeId] + [s for s in steps if s != graph.entryNodeId and graph.node(s)]
            raise CrewError(
                "E_INVALID_TRANSITION",
                f"Cannot rewind to '{target}': the target must be the entry node or a completed step "
                f"({', '.join(allowed)}).",
                {"to": target, "allowedTargets": allowed},
            )
        kept = steps[: steps.index(target)] if target in steps else []
        now = utc_now()
        origin = graph.effective_node_id(fm.get("currentNodeId"))
        if isinstance(fm["variables"], dict):
            fm["variables"].pop("workflowStatus", None)
        entry = {"from": origin, "to": target, "label": "rewind", "reason": args.reason or "rewind", "decidedAt": now}
        fm.update(currentNodeId=target, stepsCompleted=kept, decisionLog=[*fm["decisionLog"], entry], updatedAt=now)
        moved.update(target=target, dropped=steps[len(kept) :])
        return render_draft(fm, doc.body)

    done = change_state(ctx, build, rewind=True)
    return ToolOutcome(
        ok(
            path=STATE_ALIAS,
            currentNodeId=moved["target"],
            stepsCompleted=done.frontmatter["stepsCompleted"],
            dropped=moved["dropped"],
            sha256After=done.sha256_after,
        ),
        state_changed=True,
        state=done.frontmatter,
    )
