"""Argument models of the built-in tools: they parse what the model sent and generate the wire schemas.

Legacy shapes the corpus also uses are accepted on input but not advertised:
`query`/`globs` for fs_search and the flat `{path, operation, update}` form of fs_apply_patch.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from jsonschema import Draft202012Validator, SchemaError
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, model_validator

_PATH = "Alias path: @project/... (project, read-write), @pkg/... (package, read-only), @state/... (run state)."


class _Args(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True, coerce_numbers_to_str=True)


class ReadArgs(_Args):
    """Read a UTF-8 text file, whole or as a 1-based inclusive line window."""

    path: str = Field(description=_PATH)
    startLine: int | None = Field(None, ge=1, description="First line to return (1-based).")
    endLine: int | None = Field(None, ge=1, description="Last line to return (inclusive).")

    @model_validator(mode="after")
    def _window(self) -> ReadArgs:
        if self.startLine and self.endLine and self.endLine < self.startLine:
            raise ValueError("endLine must be greater than or equal to startLine")
        return self


class ListArgs(_Args):
    """List the direct children of a folder (folders end with '/'; hidden entries and symlinks are skipped)."""

    path: str = Field(description=_PATH)


class SearchArgs(_Args):
    """Search text files under a folder (or in one file) for a substring, or a regex written as /.../ or /.../i."""

    path: str = Field("@project", description="Folder or file to search. " + _PATH)
    pattern: str = Field(
        min_length=1,
        validation_alias=AliasChoices("pattern", "query"),
        description="Plain substring (case-sensitive), or /regex/ or /regex/i.",
    )
    before: int = Field(1, ge=0, le=20, description="Context lines before each match.")
    after: int = Field(1, ge=0, le=20, description="Context lines after each match.")
    maxMatches: int = Field(50, ge=1, description="Stop after this many matches (at most 50).")
    globs: list[str] | None = Field(
        None, description="Optional file filters such as '*.md' or '@project/artifacts/*.md'."
    )


class WriteArgs(_Args):
    """Create or overwrite a whole file (atomic). Writing @state/workflow.md is validated against the graph."""

    path: str = Field(description=_PATH + " @pkg is read-only.")
    content: str = Field(description="The complete new file content.")
    ifMatchSha256: str | None = Field(None, description="Only write if the current file has this sha256.")


class Patch(_Args):
    operation: Literal["updateFrontmatter", "replace"] = Field(
        description="updateFrontmatter: change @state/workflow.md frontmatter fields. "
        "replace: swap one exact, unique text snippet in a @project text file."
    )
    update: dict[str, Any] | None = Field(
        None,
        description="updateFrontmatter only, e.g. {\"stepsCompleted\": {\"append\": [\"step-01\"]}, "
        "\"variables\": {\"set\": {\"k\": \"v\"}}, \"currentNodeId\": {\"set\": \"step-02\"}, "
        "\"artifacts\": {\"append\": [\"artifacts/x.md\"]}, \"decisionLog\": {\"append\": [{\"from\": \"a\", "
        "\"to\": \"b\", \"label\": \"l\", \"reason\": \"r\"}]}, \"updatedAt\": {\"set\": \"<ISO time>\"}}.",
    )
    oldText: str | None = Field(None, description="replace only: the exact text to find (must occur once).")
    newText: str | None = Field(None, description="replace only: the text to put in its place.")
    ifMatchSha256: str | None = Field(None, description="Only patch if the current file has this sha256.")

    @model_validator(mode="after")
    def _operands(self) -> Patch:
        if self.operation == "updateFrontmatter" and not isinstance(self.update, dict):
            raise ValueError("updateFrontmatter needs an 'update' object")
        if self.operation == "replace":
            extra = self.update or {}
            self.oldText = self.oldText if self.oldText is not None else extra.get("oldText")
            self.newText = self.newText if self.newText is not None else extra.get("newText")
            if not self.oldText:
                raise ValueError("replace needs a non-empty 'oldText'")
            if not isinstance(self.newText, str):
                raise ValueError("replace needs 'newText' (use \"\" to delete the text)")
        return self


class PatchArgs(_Args):
    """Edit a file in place: frontmatter updates of @state/workflow.md, or an exact text replacement in @project."""

    path: str = Field(description=_PATH)
    patch: Patch

    @model_validator(mode="before")
    @classmethod
    def _flat_form(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("patch"), str):
            try:  # some models send the patch object JSON-encoded a second time
                data = {**data, "patch": json.loads(data["patch"])}
            except (json.JSONDecodeError, RecursionError):
                pass
        if isinstance(data, dict) and "patch" not in data and "operation" in data:
            keys = ("operation", "update", "oldText", "newText", "ifMatchSha256")
            data = {**data, "patch": {k: data[k] for k in keys if k in data}}
        if isinstance(data, dict) and isinstance(data.get("patch"), dict) and "ifMatchSha256" in data:
            data = {**data, "patch": {"ifMatchSha256": data["ifMatchSha256"], **data["patch"]}}
        return data


class Option(_Args):
    value: str
    label: str
    description: str | None = None


class FeedbackItem(_Args):
    id: str
    content: str


class Action(_Args):
    id: str
    label: str
    description: str | None = None


WidgetType = Literal["form", "selection", "confirmation", "plan_review", "feedback", "action_selection"]


class WidgetPayload(_Args):
    """Ask the user for structured input; the run pauses until they answer (WIDGET_SUBMIT)."""

    widgetId: str = Field(min_length=1, description="Your id for this question, e.g. 'story_key'.")
    type: WidgetType
    message: str = Field(min_length=1, description="What the user should decide or fill in.")
    form_schema: dict[str, Any] | None = Field(
        None,
        alias="schema",
        description="form only: JSON Schema object with 'properties' (string, number, boolean, enum) and 'required'.",
    )
    options: list[Option] | None = Field(None, description="selection only: the choices.")
    multi: bool | None = Field(None, description="selection only: allow several choices.")
    planContent: str | None = Field(None, description="plan_review only: the plan (Markdown).")
    items: list[FeedbackItem] | None = Field(None, description="feedback only: items to comment on.")
    actions: list[Action] | None = Field(None, description="action_selection only: the actions.")

    @model_validator(mode="after")
    def _type_rules(self) -> WidgetPayload:
        if self.type == "selection" and not self.options:
            raise ValueError("a selection widget needs a non-empty 'options' list")
        if self.type == "action_selection" and not self.actions:
            raise ValueError("an action_selection widget needs a non-empty 'actions' list")
        if self.type == "form":
            schema = self.form_schema or {}
            props = schema.get("properties")
            if not isinstance(props, dict) or not props:
                raise ValueError("a form widget needs a 'schema' object with non-empty 'properties'")
            try:
                Draft202012Validator.check_schema(schema)
            except SchemaError as exc:
                raise ValueError(f"the form 'schema' is not a valid JSON Schema: {exc.message}") from None
        return self

    def payload(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True)


class RewindArgs(_Args):
    """Move the run back to the entry node or an already completed step. Needs the user's agreement first."""

    targetNodeId: str = Field(min_length=1, description="The entry node id, or a node id listed in stepsCompleted.")
    confirmed: bool = Field(False, description="Must be true, after the user agreed to the rewind.")
    reason: str | None = Field(None, description="Why the run goes back (kept in the decision log).")


class ShellRunArgs(_Args):
    """Run a command line in the project folder, in a sandbox (no network unless configured). Returns exit code and output."""

    command: str = Field(min_length=1, max_length=20_000, description="A shell command line, e.g. 'python -m pytest -q'. "
                         "@project/... and @pkg/... in it name the same files as for the fs tools.")
    cwd: str | None = Field(None, description="Folder to run in: @project or @project/<dir> (default @project).")
    timeout_seconds: int | None = Field(None, ge=1, description="Stop the command after this many seconds "
                                        "(capped by the operator's limit).")


def readable(exc: ValidationError) -> tuple[str, list[dict[str, str]]]:
    """Pydantic errors as one sentence plus a {path, message} list for the model to fix its call."""
    errors = []
    for err in exc.errors(include_url=False, include_input=False):
        path = ""
        for part in err["loc"]:
            path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
        message = err["msg"].removeprefix("Value error, ")
        errors.append({"path": path or "(arguments)", "message": message})
    text = "; ".join(f"{e['path']}: {e['message']}" for e in errors[:4])
    return text, errors


def wire_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON Schema made compact for a function definition (no titles, refs inlined)."""
    raw = model.model_json_schema(by_alias=True)
    defs = raw.pop("$defs", {})
    return _compact(raw, defs)


def _compact(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_compact(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        return _compact(defs[node["$ref"].rsplit("/", 1)[-1]], defs)
    any_of = node.get("anyOf")
    if isinstance(any_of, list) and len(any_of) == 2 and {"type": "null"} in any_of:
        kept = next(n for n in any_of if n != {"type": "null"})
        node = {**{k: v for k, v in node.items() if k != "anyOf"}, **kept}
    out = {k: _compact(v, defs) for k, v in node.items() if not (k == "title" and isinstance(v, str))}
    if out.get("default", 0) is None:
        del out["default"]
    return out
