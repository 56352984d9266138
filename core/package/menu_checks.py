"""Package check: every agent menu item points at a workflow, prompt, exec or data file that exists."""

from __future__ import annotations

from typing import Any

from .docs import Inspector, MenuTargets, WorkflowRef, package_ref
from .problems import CLASSIC_CODE

_PROJECT_SIDE = ("@project", "{project-root}", "{artifacts-root}", "@state", "{state-root}")
CLASSIC_SUFFIXES = (".yaml", ".yml", ".xml")


class MenuChecks(Inspector):

    def check_menus(self, agents: dict[str, Any], file: str, refs: list[WorkflowRef]) -> None:
        targets = MenuTargets([r.id for r in refs], [p for r in refs if (p := package_ref(r.workflow))])
        items = agents.get("agents") if isinstance(agents.get("agents"), list) else []
        for i, agent in enumerate(items):
            if not isinstance(agent, dict):
                continue
            prompts = agent.get("prompts") if isinstance(agent.get("prompts"), list) else []
            targets.prompt_ids = {p["id"] for p in prompts if isinstance(p, dict) and isinstance(p.get("id"), str)}
            menu = agent.get("menu") if isinstance(agent.get("menu"), list) else []
            for j, item in enumerate(menu):
                if not isinstance(item, dict) or str(item.get("unavailable") or "").strip():
                    continue  # an item an import marked unavailable is refused with its reason: nothing to fix
                where = f"$.agents[{i}].menu[{j}]"
                self.check_menu_refs(item, file, where, targets)
                triggers = item.get("triggers") if isinstance(item.get("triggers"), list) else []
                for k, trigger in enumerate(triggers):
                    if isinstance(trigger, dict):
                        self.check_menu_refs(trigger, file, f"{where}.triggers[{k}]", targets)
                if item.get("ide-only") is True and item.get("web-only") is True:
                    self.error(file, where, "the item is both ide-only and web-only, so no surface can show it",
                               "keep at most one of ide-only / web-only")

    def check_menu_refs(self, item: dict[str, Any], file: str, where: str, targets: MenuTargets) -> None:
        workflow, exec_, action, data = (item.get(k) for k in ("workflow", "exec", "action", "data"))
        if isinstance(workflow, str) and workflow.strip():
            self.check_menu_workflow(workflow.strip(), file, f"{where}.workflow", targets)
        if isinstance(exec_, str) and exec_.strip():
            self.check_menu_exec(exec_.strip(), file, f"{where}.exec", targets)
        if isinstance(data, str) and data.strip():
            self.check_menu_file(data.strip(), file, f"{where}.data", "data file", required=False)
        if isinstance(action, str) and action.startswith("#") and action[1:] not in targets.prompt_ids:
            self.warn(file, f"{where}.action", f"prompt '{action[1:]}' is not defined in this agent's prompts",
                      "add a prompt with that id, or fix the action")

    def check_menu_workflow(self, value: str, file: str, where: str, targets: MenuTargets) -> None:
        if value in targets.workflow_ids or package_ref(value) in targets.workflow_paths:
            return
        if value.lower().endswith(CLASSIC_SUFFIXES):
            self.warn(file, where, f"'{value}' is a classic BMAD workflow; this menu item will be refused",
                      "point the item at a v1.1 workflow id or workflow.md", CLASSIC_CODE)
            return
        self.error(file, where,
                   f"workflow '{value}' is neither a workflow id ({', '.join(targets.workflow_ids) or 'none'}) "
                   f"nor a workflow.md listed in bmad.json ({', '.join(targets.workflow_paths) or 'none'})",
                   "use one of those ids or paths", "UNKNOWN_WORKFLOW")

    def check_menu_exec(self, value: str, file: str, where: str, targets: MenuTargets) -> None:
        """An exec runs the workflow whose workflow.md it names exactly, else it is a markdown script.
        A workflow-named file that is not a listed workflow would never run as one: an error."""
        if package_ref(value) in targets.workflow_paths:
            return
        name = value.rsplit("/", 1)[-1].lower()
        if name.startswith("workflow") and name.endswith(".md"):
            listed = ", ".join(targets.workflow_paths) or "none"
            self.error(file, where,
                       f"exec '{value}' names a workflow file that is not one of this package's workflows ({listed})",
                       "point exec at one of those workflow.md paths, or add a bmad.json workflows[] record "
                       "(id, workflow, graph) for this file", "UNKNOWN_WORKFLOW")
            return
        self.check_menu_file(value, file, where, "exec file", required=True)

    def check_menu_file(self, value: str, file: str, where: str, what: str, *, required: bool) -> None:
        if value.startswith(_PROJECT_SIDE):
            return  # lives in the project, checked when the item is used
        if required and value.lower().endswith(CLASSIC_SUFFIXES):
            self.warn(file, where, f"'{value}' is a classic BMAD workflow; this menu item will be refused",
                      "point the item at a markdown file", CLASSIC_CODE)
            return
        if self.locate(value) is not None:
            return
        reason = "is not a path inside the package" if package_ref(value) is None else "does not exist in the package"
        fix = "add the file to the package, or use an @project/... path for project files"
        if required:
            self.error(file, where, f"{what} '{value}' {reason}", fix, "FILE_MISSING")
        else:
            self.warn(file, where, f"{what} '{value}' {reason}", fix)
