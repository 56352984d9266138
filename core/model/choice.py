"""Which models a conversation may switch between (`*model NAME`), and the one it uses unless told.

The operator lists them in crewagent.yml (`models: {default, allowed}`); without that list the one
configured model is both the default and the only choice, so `*model` still says what is in use.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ModelChoice(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a mistyped key in crewagent.yml is an error, not ignored

    default: str = Field(min_length=1)
    """The model a conversation uses until someone picks another."""
    allowed: list[str] = Field(default_factory=list)
    """The models `*model NAME` may pick (the default is always one of them)."""

    @model_validator(mode="after")
    def _default_is_allowed(self) -> ModelChoice:
        if not self.allowed:
            self.allowed = [self.default]
        elif self.default not in self.allowed:
            raise ValueError(f"the default model '{self.default}' is not in allowed ({', '.join(self.allowed)})")
        return self

    def allows(self, name: str) -> bool:
        return name in self.allowed

    def in_use(self, chosen: str | None) -> str:
        """The model a conversation that chose `chosen` (None: nothing) calls now."""
        return chosen if chosen and self.allows(chosen) else self.default

    def listed(self) -> str:
        return ", ".join(f"`{name}`" for name in self.allowed)
