"""The sampling fields of a generation request: one record for the client that sends them and the
server that reads them.

The names, meanings and defaults are vLLM's `SamplingParams` (Triton's vLLM backend reads them from
the `sampling_parameters` input as a JSON object); `max_tokens` defaults to vLLM's 16. The server
(serving.generation.requests) checks each field's range; the client (model_client.generate) sends
what differs from these defaults.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

#: vLLM's default output length when a request does not ask for one.
DEFAULT_MAX_TOKENS = 16
#: Sent whatever their value: the receiving server's defaults may differ from the sender's.
ALWAYS_SENT = ("max_tokens", "temperature")


@dataclass(frozen=True)
class SamplingFields:
    max_tokens: int = DEFAULT_MAX_TOKENS
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    ignore_eos: bool = False
    #: vLLM's `stop`: generation ends where one of these appears in the text, which is cut before it
    #: (finish reason "stop").
    stop: tuple[str, ...] = ()

    def sampling_json_fields(self) -> dict[str, Any]:
        """The fields as `sampling_parameters` carries them: ALWAYS_SENT, and the others where they
        differ from vLLM's defaults."""
        fields: dict[str, Any] = {name: getattr(self, name) for name in ALWAYS_SENT}
        for field in dataclasses.fields(SamplingFields):
            value = getattr(self, field.name)
            if field.name not in ALWAYS_SENT and value != field.default:
                fields[field.name] = list(value) if isinstance(value, tuple) else value
        return fields

    @staticmethod
    def values_from_json(fields: Mapping[str, Any]) -> dict[str, Any]:
        """Keyword arguments for a SamplingFields (or a subclass) from checked JSON fields: numbers
        as their field's type, one stop string as a tuple of one; absent fields left to the defaults."""
        values: dict[str, Any] = {}
        for name, convert in (("max_tokens", int), ("temperature", float), ("top_p", float), ("top_k", int),
                              ("ignore_eos", bool)):
            if name in fields:
                values[name] = convert(fields[name])
        if fields.get("seed") is not None:
            values["seed"] = int(fields["seed"])
        if "stop" in fields:
            values["stop"] = stop_strings(fields["stop"])
        return values


def stop_strings(value: str | Sequence[str]) -> tuple[str, ...]:
    """vLLM's `stop` as sent (one string, or a list of them) as the tuple SamplingFields holds."""
    return (value,) if isinstance(value, str) else tuple(value)
