"""JSON objects whose keys are another program's (or a stored record's), named once each. Everything of
k25-ctl's own is a dataclass or a model; these cross a boundary where the other side defines the shape."""

from __future__ import annotations

from typing import Any

# A level's summary keyed as `vllm bench serve --save-result` writes it (vLLM's names; k25-ctl adds keys).
VllmSummary = dict[str, Any]
# One measured request as stored: compact keys, written and read back whole (GET ?requests=true).
RequestRow = dict[str, Any]
# An OpenAI-compatible request body, with the engine's own extras (ignore_eos, chat_template_kwargs...).
RequestBody = dict[str, Any]
# An object stored as JSON text in the runs database (a request as posted, a spec, a report) and returned
# as it was stored.
StoredJson = dict[str, Any]
# A JSON object another program answered or wrote: an engine's /server_info, a journald entry (journalctl
# -o json), FastAPI's OpenAPI document.
ForeignJson = dict[str, Any]
