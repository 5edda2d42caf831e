"""The base of every response model, and the redacted field types: secrets never leave in a read."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict

from daemon.core import redact


class Out(BaseModel):
    model_config = ConfigDict(from_attributes=True)


# Secrets never leave in a read: command lines, titles, excerpts and reasons are redacted as they are built.
SafeArgv = Annotated[list[str], AfterValidator(redact.argv)]
SafeText = Annotated[str, AfterValidator(redact.text)]
SafeOptionalText = Annotated[str | None, AfterValidator(redact.optional_text)]
