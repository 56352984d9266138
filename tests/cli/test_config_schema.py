"""`crewagent config schema`: the JSON Schema of crewagent.yml comes from the settings models, and the
example config and the documentation's reference page are built from it."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest
import yaml
from jsonschema import Draft202012Validator

from crewagent.bot.config import ConfigError, FileConfig, read_file_config
from crewagent.cli.config_cmd import config_schema
from crewagent.cli.main import main
from tests.support.paths import EXAMPLES, REPO

EXAMPLE_CONFIG = EXAMPLES / "crewagent.yml"
SCHEMA_LINE = "# yaml-language-server: $schema="


def _printed_schema(capsys: pytest.CaptureFixture[str]) -> dict:
    assert main(["config", "schema"]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_schema_lists_every_key_the_file_may_set(capsys: pytest.CaptureFixture[str]) -> None:
    schema = _printed_schema(capsys)
    Draft202012Validator.check_schema(schema)
    settable = {name for name, field in FileConfig.model_fields.items() if not field.exclude}
    assert set(schema["properties"]) == settable
    assert schema["additionalProperties"] is False  # an unknown key is an error, as serve says
    assert "servers" not in schema["$defs"]["SystemToolPolicy"]["properties"]  # set by the bot, not the file
    limits = schema["$defs"]["Limits"]["properties"]["max_concurrent_runs"]
    assert limits["default"] == 8 and limits["minimum"] == 1 and limits["description"]


def test_the_schema_and_the_bot_agree_on_good_and_bad_files(tmp_path: Path) -> None:
    validator = Draft202012Validator(config_schema())
    good = {"commands": {"env": {"PIP_INDEX_URL": "${PIP_INDEX_URL}"}, "rules": [{"prefix": "git diff",
            "decision": "allow"}]}, "limits": {"max_concurrent_runs": 2}, "mcp_servers": {"t": {"url": "http://x/"}}}
    assert list(validator.iter_errors(good)) == []  # a mapping where the bot keeps pairs: the file's shape
    path = tmp_path / "good.yml"
    path.write_text(yaml.safe_dump(good), encoding="utf-8")
    assert read_file_config(path).commands is not None
    bad = {"limits": {"max_concurrent_runs": 0}, "mcp_servers": {"x": {"command": "a", "bogus": 1}}, "nope": 1}
    assert len(list(validator.iter_errors(bad))) == 3
    path = tmp_path / "crewagent.yml"
    path.write_text(yaml.safe_dump(bad), encoding="utf-8")
    with pytest.raises(ConfigError, match="nope"):
        read_file_config(path)


def test_the_example_config_points_editors_at_the_schema_and_is_valid(capsys: pytest.CaptureFixture[str]) -> None:
    first = EXAMPLE_CONFIG.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith(SCHEMA_LINE)
    schema_file = EXAMPLE_CONFIG.parent / first.removeprefix(SCHEMA_LINE)
    # The committed copy is what `crewagent config schema` prints now; regenerate it when a key changes:
    #   crewagent config schema > examples/crewagent.schema.json
    assert json.loads(schema_file.read_text(encoding="utf-8")) == _printed_schema(capsys)
    data = yaml.safe_load(EXAMPLE_CONFIG.read_text(encoding="utf-8"))
    Draft202012Validator(config_schema()).validate(data)
    assert read_file_config(EXAMPLE_CONFIG).limits.max_concurrent_runs == 8


def _hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("config_reference", REPO / "docs" / "hooks" / "config_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_reference_page_has_a_row_for_every_key() -> None:
    hook = _hook()
    schema = config_schema()
    page = hook.reference(schema)
    for key in schema["properties"]:
        assert f"\n| `{key}` |" in page, key
    for name, model in schema["$defs"].items():
        assert f" {{#config-{name.lower()}}}" in page, name
        for key in model.get("properties", {}):
            assert f"| `{key}` |" in page, (name, key)
    assert "| `limits` | [limits](#config-limits) |" in page and "\n### limits {#config-limits}\n" in page
    assert "\n### channels.NAME {#config-binding}\n" in page  # a map's values: the key that holds them
    assert (REPO / "docs" / hook.PAGE).read_text(encoding="utf-8").count(hook.MARKER) == 1
