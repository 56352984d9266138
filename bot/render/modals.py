"""`ui_ask_user` answers that need typing: a modal built from the widget, and its submission checked.

Forms come from the widget's JSON Schema subset (string, number, integer, boolean, enum,
array of enum; `required`); multi-select selections, plan change requests and per-item
feedback reuse the same machinery with a synthesised field list. A submission is parsed
from `view.state.values`, validated (required fields, number syntax, then the schema itself)
and either turned into the widget value or into per-field errors shown in the modal.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from slack_sdk.models.blocks import (
    Block,
    InputBlock,
    NumberInputElement,
    Option,
    PlainTextInputElement,
    PlainTextObject,
    RadioButtonsElement,
    SectionBlock,
    StaticMultiSelectElement,
    StaticSelectElement,
    MarkdownTextObject,
)
from slack_sdk.models.views import View

from ..base.actions import FORM_CALLBACK, FormContext, FormMode
from .mrkdwn import to_mrkdwn, truncate

FieldKind = Literal["text", "multiline", "number", "integer", "boolean", "enum", "multi_enum"]
VALUE_ACTION = "value"
BLOCK_PREFIX = "field:"
MAX_FIELDS = 90  # a modal holds 100 blocks; keep room for the intro
REQUIRED = "This field is required."


@dataclass
class FormField:
    name: str
    label: str
    kind: FieldKind = "text"
    required: bool = False
    hint: str | None = None
    options: list[tuple[str, str]] = field(default_factory=list)  # (value, label)
    default: Any = None

    @property
    def block_id(self) -> str:
        return f"{BLOCK_PREFIX}{self.name}"[:255]


def _options(values: list[Any], labels: dict[str, str] | None = None) -> list[tuple[str, str]]:
    return [(str(v), (labels or {}).get(str(v), str(v))) for v in values]


def fields_from_schema(schema: dict[str, Any]) -> list[FormField]:
    props = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(props, dict):
        return []
    required = set(schema.get("required") or [])
    fields: list[FormField] = []
    for name, spec in list(props.items())[:MAX_FIELDS]:
        spec = spec if isinstance(spec, dict) else {}
        kind: FieldKind = "text"
        options: list[tuple[str, str]] = []
        typ = spec.get("type")
        if isinstance(typ, list):
            typ = next((t for t in typ if t != "null"), "string")
        if isinstance(spec.get("enum"), list):
            kind, options = "enum", _options(spec["enum"])
        elif typ == "array" and isinstance((spec.get("items") or {}).get("enum"), list):
            kind, options = "multi_enum", _options(spec["items"]["enum"])
        elif typ == "boolean":
            kind = "boolean"
        elif typ == "integer":
            kind = "integer"
        elif typ == "number":
            kind = "number"
        elif spec.get("format") == "textarea" or int(spec.get("maxLength") or 0) > 150:
            kind = "multiline"
        fields.append(
            FormField(
                name=str(name),
                label=str(spec.get("title") or name),
                kind=kind,
                required=name in required,
                hint=spec.get("description"),
                options=options,
                default=spec.get("default"),
            )
        )
    return fields


def form_spec(widget: dict[str, Any], mode: FormMode) -> tuple[str, list[FormField]]:
    """Modal title and fields for a widget answered in `mode`."""
    if mode == "multi_select":
        options = [
            (str(o.get("value")), str(o.get("label") or o.get("value")))
            for o in widget.get("options") or []
            if isinstance(o, dict)
        ]
        choice = FormField(name="choice", label="Your choice", kind="multi_enum", required=True, options=options)
        return "Choose", [choice]
    if mode == "changes":
        return "Request changes", [
            FormField(name="feedback", label="What should change?", kind="multiline", required=True)
        ]
    if mode == "feedback":
        items = [i for i in widget.get("items") or [] if isinstance(i, dict) and i.get("id")]
        return "Feedback", [
            FormField(name=str(i["id"]), label=truncate(str(i.get("content") or i["id"]), 2000), kind="multiline")
            for i in items[:MAX_FIELDS]
        ]
    return "Form", fields_from_schema(widget.get("schema") or {})


def _element(f: FormField) -> Any:
    text_opts = [
        Option(text=PlainTextObject(text=truncate(label, 75)), value=value[:150]) for value, label in f.options[:100]
    ]
    if f.kind in ("text", "multiline"):
        initial = str(f.default) if isinstance(f.default, (str, int, float)) else None
        return PlainTextInputElement(action_id=VALUE_ACTION, multiline=f.kind == "multiline", initial_value=initial)
    if f.kind in ("number", "integer"):
        initial = f.default if isinstance(f.default, (int, float)) and not isinstance(f.default, bool) else None
        return NumberInputElement(action_id=VALUE_ACTION, is_decimal_allowed=f.kind == "number", initial_value=initial)
    if f.kind == "boolean":
        yes = Option(text=PlainTextObject(text="Yes"), value="true")
        no = Option(text=PlainTextObject(text="No"), value="false")
        initial = {True: yes, False: no}.get(f.default) if isinstance(f.default, bool) else None
        return RadioButtonsElement(action_id=VALUE_ACTION, options=[yes, no], initial_option=initial)
    if f.kind == "enum":
        initial = next((o for o in text_opts if o.value == str(f.default)), None)
        return StaticSelectElement(action_id=VALUE_ACTION, options=text_opts, initial_option=initial)
    return StaticMultiSelectElement(action_id=VALUE_ACTION, options=text_opts)


def build_modal(widget: dict[str, Any], context: FormContext) -> View:
    title, fields = form_spec(widget, context.m)
    blocks: list[Block] = []
    message = str(widget.get("message") or "").strip()
    if message:
        blocks.append(SectionBlock(text=MarkdownTextObject(text=truncate(to_mrkdwn(message), 3000))))
    for f in fields:
        blocks.append(
            InputBlock(
                block_id=f.block_id,
                label=PlainTextObject(text=truncate(f.label, 2000)),
                element=_element(f),
                optional=not f.required,
                hint=PlainTextObject(text=truncate(str(f.hint), 2000)) if f.hint else None,
            )
        )
    if not fields:
        blocks.append(SectionBlock(text=MarkdownTextObject(text="_This form has no fields; submit to continue._")))
    return View(
        type="modal",
        callback_id=FORM_CALLBACK,
        title=PlainTextObject(text=title),
        submit=PlainTextObject(text="Submit"),
        close=PlainTextObject(text="Cancel"),
        private_metadata=context.model_dump_json(exclude_none=True),
        blocks=blocks,
    )


def _raw(state_values: dict[str, Any], f: FormField) -> Any:
    """The submitted value of one field, or None if left empty."""
    entry = (state_values.get(f.block_id) or {}).get(VALUE_ACTION) or {}
    if "selected_options" in entry:
        return [o.get("value") for o in entry.get("selected_options") or []] or None
    if "selected_option" in entry:
        option = entry.get("selected_option")
        return option.get("value") if isinstance(option, dict) else None
    value = entry.get("value")
    return value if value not in (None, "") else None


def parse_submission(
    widget: dict[str, Any], mode: FormMode, state_values: dict[str, Any]
) -> tuple[Any, dict[str, str]]:
    """(answer value, {}) when valid, else (None, {block_id: error}) to show in the modal."""
    _, fields = form_spec(widget, mode)
    errors: dict[str, str] = {}
    data: dict[str, Any] = {}
    for f in fields:
        raw = _raw(state_values, f)
        if raw is None:
            if f.required:
                errors[f.block_id] = REQUIRED
            continue
        if f.kind in ("number", "integer"):
            try:
                number = float(raw)
                data[f.name] = int(number) if f.kind == "integer" and number.is_integer() else number
                if f.kind == "integer" and not number.is_integer():
                    errors[f.block_id] = "Enter a whole number."
            except (TypeError, ValueError):
                errors[f.block_id] = "Enter a number."
        elif f.kind == "boolean":
            data[f.name] = raw == "true"
        else:
            data[f.name] = raw
    if mode == "form":
        for block, message in _schema_errors(widget.get("schema") or {}, data, fields).items():
            errors.setdefault(block, message)
    if errors:
        return None, errors
    if mode == "multi_select":
        return list(data.get("choice") or []), {}
    if mode == "changes":
        return {"decision": "request_changes", "feedback": data.get("feedback", "")}, {}
    return data, {}


def _schema_errors(schema: dict[str, Any], data: dict[str, Any], fields: list[FormField]) -> dict[str, str]:
    """Check the assembled answer against the widget's own schema (min/max, patterns, lengths...)."""
    try:
        validator = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
        found = list(validator.iter_errors(data))
    except SchemaError:
        return {}
    by_name = {f.name: f for f in fields}
    errors: dict[str, str] = {}
    for err in found:
        if err.validator == "required" and not err.path and isinstance(err.instance, dict):
            for name in (n for n in schema.get("required") or [] if n not in err.instance and n in by_name):
                errors.setdefault(by_name[name].block_id, REQUIRED)
            continue
        name = str(err.path[0]) if err.path else None
        target = by_name.get(name or "")
        block = target.block_id if target else (fields[0].block_id if fields else None)
        if block and block not in errors:
            errors[block] = truncate(err.message, 150)
    return errors


def decode_context(raw: str | None) -> FormContext | None:
    try:
        return FormContext.model_validate(json.loads(raw or ""))
    except (ValueError, TypeError):
        return None
