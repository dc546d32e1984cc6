"""What a generation request asks for, validated before it reaches the scheduler.

`sampling_parameters` is a JSON object, as in Triton's vLLM backend. Accepted fields are listed in
`SAMPLING_FIELDS`; anything else is rejected by name (a typo must not silently fall back to a
default). `priority` and `deadline_ms` are this server's additions: 1 = realtime (admitted first),
2 = batch (the default); `deadline_ms` ends the sequence that many milliseconds after arrival and
returns the tokens so far with finish reason "deadline".
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from contracts.sampling import DEFAULT_MAX_TOKENS, SamplingFields, stop_strings
from serving.generation.chat import render_chat_prompt
from serving.generation.errors import InvalidGenerationRequest

#: field -> (type, description of the allowed values)
SAMPLING_FIELDS: dict[str, tuple[type | tuple[type, ...], str]] = {
    "max_tokens": (int, "an integer from 1 to 2**31 - 1"),
    "temperature": ((int, float), "a number from 0 to 1e6 (0, or below 1e-5, = greedy)"),
    "top_p": ((int, float), "a number in (0, 1]"),
    "top_k": (int, "an integer from 0 (no limit) to 2**31 - 1"),
    "seed": (int, "an integer from 0 to 2**64 - 1"),
    "ignore_eos": (bool, "true or false"),
    "stop": ((str, list), "a non-empty string or a list of 1 to 4 of them, each at most 64 characters"),
    "priority": (int, "1 (realtime) or 2 (batch)"),
    "deadline_ms": ((int, float), "a number of milliseconds in (0, 1e9]"),
}
#: Where the fields came from, as the caller named them: the `sampling_parameters` input (the vLLM
#: backend's) or, without it, the request's own parameters (the generate endpoint's "parameters").
FROM_INPUT, FROM_REQUEST = "sampling_parameters", "the request's parameters"
#: Request parameters that are not sampling fields but this model's input tensors: the vLLM
#: backend's README sends `{"parameters": {"stream": false, "temperature": 0}}` to /generate, and
#: that backend reads these from the tensors only, so they are passed over here too (the tensor
#: decides), not refused as unknown.
INPUT_NAMES_IN_PARAMETERS = ("stream", "exclude_input_in_output")
_INT31, _UINT64 = 2**31 - 1, 2**64 - 1
#: Temperatures below this sample greedily (vLLM's threshold): dividing logits by a subnormal
#: temperature overflows to inf, and a NaN distribution used to fail the whole step, every
#: running request with it.
GREEDY_BELOW_TEMPERATURE = 1e-5


@dataclass(frozen=True)
class SamplingParams(SamplingFields):
    """A request's sampling fields (contracts.sampling: vLLM's names and defaults), as the engine reads them."""

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW_TEMPERATURE or self.top_k == 1


@dataclass(frozen=True)
class GenerationRequest:
    """A validated request: token ids, sampling, priority level and deadline (seconds from arrival)."""

    request_id: str
    prompt: tuple[int, ...]
    sampling: SamplingParams
    priority: int
    deadline_s: float | None = None
    stream: bool = False
    #: The request's Triton `timeout` (seconds): not admitted by then, it is refused as Triton refuses
    #: a batched model's request that waited too long in its queue.
    queue_timeout_s: float | None = None


def _check(name: str, value: Any, source: str = FROM_INPUT, sent: Any = None) -> Any:
    """`value` if allowed for field `name`, else InvalidGenerationRequest naming what was `sent`
    (the caller's form, before `as_vllm_backend_reads`; `value` itself when not given)."""
    types, allowed = SAMPLING_FIELDS[name]
    ok = isinstance(value, types) and not (isinstance(value, bool) and types is not bool)
    if ok and isinstance(value, float) and not math.isfinite(value):
        ok = False
    if ok:  # upper bounds too: a 400-digit integer must be refused here, not overflow a float later
        if name == "max_tokens":
            ok = 1 <= value <= _INT31
        elif name in ("temperature",):
            ok = 0 <= value <= 1e6
        elif name == "top_p":
            ok = 0 < value <= 1
        elif name == "top_k":
            ok = 0 <= value <= _INT31
        elif name == "seed":
            ok = 0 <= value <= _UINT64
        elif name == "priority":
            ok = value in (1, 2)
        elif name == "deadline_ms":
            ok = 0 < value <= 1e9
        elif name == "stop":
            stops = stop_strings(value)
            ok = 1 <= len(stops) <= 4 and all(isinstance(s, str) and 1 <= len(s) <= 64 for s in stops)
    if not ok:
        shown_value = value if sent is None else sent
        shown = repr(shown_value)
        if len(shown) > 40:  # a string's own length, not its repr's (quotes and escapes)
            shown = f"{shown[:20]}... ({len(shown_value) if isinstance(shown_value, str) else len(shown)} characters)"
        hint = ""
        if (name == "seed" and source == FROM_REQUEST and isinstance(shown_value, float) and shown_value.is_integer()
                and shown_value >= 2**53):
            hint = (" (Triton hands the model a request parameter of 2**63 or more as a double, which loses its last "
                    "digits; send it in the sampling_parameters input, whose JSON keeps integers)")
        raise InvalidGenerationRequest(f"{source} `{name}` = {shown}: expected {allowed}{hint}.")
    return value


def merge_sampling_fields(from_input: Mapping[str, Any], from_request: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of the `sampling_parameters` input and of the request's parameters (a generate
    request's other JSON keys), each already checked. Why both: with the input present the request's
    parameters were never read, so `"parameters": {"max_tokens": 3, "stop": "and"}` beside it was
    ignored in silence, typos included (a review, 2026-12-07). A field in both is refused: which one
    was meant cannot be told."""
    both = sorted(set(from_input) & set(from_request))
    if both:
        raise InvalidGenerationRequest(f"{both} set both in {FROM_INPUT} and in {FROM_REQUEST}; expected each field in one "
                                       f"of them ({FROM_INPUT}, as the vLLM backend's clients send it, or the request's "
                                       f"parameters).")
    return {**from_input, **from_request}


def parse_sampling_parameters(text: str | bytes | None, source: str = FROM_INPUT) -> dict[str, Any]:
    """The JSON object of `sampling_parameters` (or of the request's parameters: `source`), each
    field checked; "" or None is {}."""
    if text is None:
        return {}
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidGenerationRequest(f"{source} is not valid UTF-8 (byte {exc.start}).") from None
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidGenerationRequest(f"{source} is not valid JSON ({exc.msg} at {exc.pos}): expected an object such as "
                                       '{"max_tokens": 32, "temperature": 0}.') from None
    except (ValueError, RecursionError) as exc:  # an integer of more digits than Python converts (4300); nesting too deep
        raise InvalidGenerationRequest(f"{source} holds a value JSON cannot be read as ({exc}): expected an object such as "
                                       '{"max_tokens": 32, "temperature": 0}.') from None
    if not isinstance(data, dict):
        raise InvalidGenerationRequest(f"{source} must be a JSON object, got {type(data).__name__}.")
    if source == FROM_REQUEST:
        data = {name: value for name, value in data.items() if name not in INPUT_NAMES_IN_PARAMETERS}
    unknown = sorted(set(data) - set(SAMPLING_FIELDS))
    if unknown:
        raise InvalidGenerationRequest(f"{source}: unknown fields {unknown}; allowed: {sorted(SAMPLING_FIELDS)}.")
    fields = {name: (as_vllm_backend_reads(name, value), value) for name, value in data.items()}
    return {name: _check(name, value, source, sent) for name, (value, sent) in fields.items() if value is not None}


def as_vllm_backend_reads(name: str, value: Any) -> Any:
    """A field as the vLLM backend's clients send it, so they work unchanged: that backend converts
    each field with its type (`int("100")`, `float("0.95")`), and its own sample client sends
    numbers as strings; null is the default (None: the field is left out); `top_k` -1 is vLLM's "no
    limit" (0 here) and an empty `stop` list no stop strings. Stricter than that backend's `bool()`
    and `int()`: "false" is False, 100.0 for an integer field is refused, and so is "1_0" (Python's
    digit grouping, which `int` accepts as 10). Anything else is left
    for `_check`, which names what is wrong ("0.5" for an integer field, "abc" for a number)."""
    if value is None or (name == "stop" and value == []):
        return None
    if isinstance(value, str) and name != "stop" and "_" not in value:  # Python reads "1_0" as 10: not a number here
        text = value.strip()
        if SAMPLING_FIELDS[name][0] is bool:
            value = {"true": True, "false": False}.get(text.lower(), value)
        else:
            for parse in (int, float):
                try:
                    value = parse(text)
                    break
                except ValueError:
                    continue
    return 0 if name == "top_k" and value == -1 else value


def prompt_text_for(text: str, apply_chat_template: bool, system_prompt: str | None, default_system_prompt: str) -> str:
    """The text the model is given (and the one a non-streamed answer starts with, unless
    `exclude_input_in_output`): `text` itself, or with `apply_chat_template` the chat prompt with
    `text` as the user's turn and `system_prompt` (else the model's default) as the system's.
    - An empty user turn is a prompt (the template's tokens), as vLLM's chat endpoint takes it; raw
      text must not be empty.
    - `system_prompt` without the template is refused by name: it was accepted and ignored, so a
      caller's instructions silently did nothing (a review, 2026-12-07)."""
    if apply_chat_template:
        return render_chat_prompt(text, default_system_prompt if system_prompt is None else system_prompt)
    if system_prompt:  # an empty one (a client that always sends the field) asks for nothing
        raise InvalidGenerationRequest("system_prompt is used only with apply_chat_template = true: set it, or put "
                                       "the instructions in text_input.")
    if text == "":
        raise InvalidGenerationRequest("text_input is empty: send at least one character of prompt text.")
    return text


def prompt_bytes_limit(max_context: int, vocabulary: "Iterable[str]") -> int:
    """The most UTF-8 bytes a prompt can have and still fit `max_context` tokens: no token covers
    more bytes than the longest vocabulary entry's UTF-8 form (an over-count for byte-level
    vocabularies, whose entries spell one byte as one, sometimes two-byte, character), so a longer
    prompt is refused before it is tokenized. Why: tokenizing an 8 MB prompt only to refuse it took
    6 s and froze every running stream of the model for as long (its Python thread holds the GIL)."""
    return max_context * max(len(entry.encode("utf-8")) for entry in vocabulary)


def check_prompt_size(prompt_text: str, limit_bytes: int, max_context: int) -> None:
    size = len(prompt_text.encode("utf-8", "surrogatepass"))
    if size > limit_bytes:
        raise InvalidGenerationRequest(
            f"the prompt is {size} bytes; the model's context is {max_context} tokens, and no token covers more than "
            f"{limit_bytes // max_context} bytes, so a prompt of more than {limit_bytes} bytes cannot fit: shorten it.")


#: A prompt longer than max_context x this many characters has its head tokenized first: when the head
#: alone holds more tokens than the context, the prompt is refused without tokenizing the rest.
HEAD_CHARS_PER_TOKEN = 16
#: Tokens the head may count above the whole prompt's share of it: where the head is cut inside a
#: special token (`<|im_start|>`: one token whole, a few as pieces).
HEAD_MARGIN_TOKENS = 16


def prompt_token_ids(tokenizer: Any, prompt_text: str, max_context: int | None = None) -> tuple[int, ...]:
    """The prompt's token ids (no special tokens added: the chat template has its own), through
    `encode_batch`, which lets go of the GIL while it tokenizes (`encode` holds it). Why: a request's
    prompt is tokenized on Triton's thread while the scheduler loop runs the running streams on its
    own; a 165,000-byte prompt of digits (within prompt_bytes_limit) took ~180 ms to tokenize and
    stopped the loop for as long, so every running stream missed its next token by that much
    (docs/measurements/2026-12-07-amd-epyc-zen5/prompt-tokenizing-gil/).

    With `max_context`, a prompt of more than max_context x HEAD_CHARS_PER_TOKEN characters has that
    head tokenized first (without the GIL too); its tokens but those of its last two pre-tokens are the
    whole prompt's there (BPE works within pre-tokens, `word_ids`), and if they alone are
    max_context + HEAD_MARGIN_TOKENS the prompt cannot fit: refused after ~16 KB of work instead of up
    to 165 KB."""
    head_chars = max_context * HEAD_CHARS_PER_TOKEN if max_context else 0
    if head_chars and len(prompt_text) > head_chars:
        (head,) = tokenizer.encode_batch([prompt_text[:head_chars]], add_special_tokens=False)
        words = [w for w in head.word_ids if w is not None]
        # the tokens of the head's last two pre-tokens (words) may differ in the whole prompt: not counted
        sure = sum(1 for w in words if w < words[-1] - 1) if words else 0
        if sure >= max_context + HEAD_MARGIN_TOKENS:
            raise InvalidGenerationRequest(
                f"the prompt is at least {sure - HEAD_MARGIN_TOKENS} tokens (its first {head_chars} characters alone "
                f"are about {len(head.ids)}); the model's context is {max_context} tokens, so at most "
                f"{max_context - 1} prompt tokens (leaving room for one output token) are accepted.")
    (encoding,) = tokenizer.encode_batch([prompt_text], add_special_tokens=False)
    return tuple(encoding.ids)


def build_request(request_id: str, prompt: tuple[int, ...], fields: Mapping[str, Any], max_context: int,
                  default_priority: int = 2, stream: bool = False, queue_timeout_us: int = 0) -> GenerationRequest:
    """Check the prompt and max_tokens against the context; the first error names the limit."""
    if not prompt:
        raise InvalidGenerationRequest("text_input is empty: send at least one character of prompt text.")
    if len(prompt) >= max_context:
        raise InvalidGenerationRequest(
            f"the prompt is {len(prompt)} tokens; the model's context is {max_context} tokens, so at most "
            f"{max_context - 1} prompt tokens (leaving room for one output token) are accepted.")
    room = max_context - len(prompt)
    # not asked for: the default, cut to what the context leaves (as vLLM); asked for: checked
    max_tokens = int(fields["max_tokens"]) if "max_tokens" in fields else min(DEFAULT_MAX_TOKENS, room)
    if max_tokens > room:
        raise InvalidGenerationRequest(
            f"`max_tokens` = {max_tokens}: the prompt is {len(prompt)} tokens and the context "
            f"{max_context}, so at most {room} output tokens fit; lower max_tokens or shorten the prompt.")
    sampling = SamplingParams(**{**SamplingParams.values_from_json(fields), "max_tokens": max_tokens})
    deadline = fields.get("deadline_ms")
    return GenerationRequest(request_id, tuple(prompt), sampling, int(fields.get("priority", default_priority)),
                             None if deadline is None else float(deadline) / 1000.0, stream,
                             queue_timeout_us / 1e6 if queue_timeout_us > 0 else None)
