"""Request validation, sampling, streaming text, KV sizing and the block pool's tensors."""
from __future__ import annotations

import numpy as np
import pytest

from serving.generation.detokenize import IncrementalDetokenizer
from serving.generation.errors import GenerationError, InvalidGenerationRequest
from serving.generation.kv_store import KvStore
from serving.generation.requests import build_request, parse_sampling_parameters
from serving.generation.sampling import new_rng, sample_token
from serving.generation.requests import SamplingParams
from serving.generation.sizing import KvLayout, plan_kv_blocks
from serving.generation.triton_config import render_generation_config
from contracts.serving_spec import ModelSpec


def test_sampling_parameters_accept_the_vllm_style_fields():
    fields = parse_sampling_parameters('{"max_tokens": 8, "temperature": 0.7, "top_p": 0.9, "top_k": 40, "seed": 1}')
    assert fields["max_tokens"] == 8 and fields["top_k"] == 40
    assert parse_sampling_parameters("") == {} and parse_sampling_parameters(None) == {}


@pytest.mark.parametrize("text, message", [
    ('{"max_tokens": 0}', r"`max_tokens` = 0: expected an integer from 1 to 2\*\*31 - 1"),
    ('{"temperature": 1' + "0" * 400 + "}", r"`temperature` = 1(0){19}\.\.\. \(401 characters\): expected a number from 0 to 1e6"),
    ('{"seed": 1' + "0" * 4400 + "}", r"sampling_parameters holds a value JSON cannot be read as \(.*4300"),
    ("[" * 100_000, r"sampling_parameters holds a value JSON cannot be read as \(maximum recursion depth"),
    ('{"deadline_ms": 1e12}', r"`deadline_ms` = 1000000000000.0: expected a number of milliseconds in \(0, 1e9\]"),
    ('{"max_tokens": true}', r"`max_tokens` = True"),
    ('{"temperature": -1}', r"`temperature` = -1"),
    ('{"beam_width": 4}', r"unknown fields \['beam_width'\]; allowed: \["),
    ('{"priority": 3}', r"`priority` = 3: expected 1 \(realtime\) or 2 \(batch\)"),
    ("[1, 2]", "must be a JSON object"),
    ("{not json", "not valid JSON"),
])
def test_bad_sampling_parameters_name_the_field_and_the_rule(text, message):
    with pytest.raises(InvalidGenerationRequest, match=message):
        parse_sampling_parameters(text)


def test_what_the_vllm_backend_accepts_is_accepted_as_it_reads_it():
    """Clients written for Triton's vLLM backend: its sample client sends numbers as strings (the
    backend converts each field with its type), null means the default, top_k -1 is vLLM's "no
    limit", [] no stop strings; the generate endpoint's "parameters" may carry `stream`."""
    from serving.generation.requests import FROM_REQUEST

    fields = parse_sampling_parameters('{"temperature": "0.1", "top_p": "0.95", "max_tokens": "100", "ignore_eos": "false"}')
    assert fields == {"temperature": 0.1, "top_p": 0.95, "max_tokens": 100, "ignore_eos": False}
    assert parse_sampling_parameters('{"seed": null, "max_tokens": null, "top_k": -1, "stop": []}') == {"top_k": 0}
    assert parse_sampling_parameters('{"stream": false, "temperature": 0}', FROM_REQUEST) == {"temperature": 0}
    with pytest.raises(InvalidGenerationRequest, match=r"`max_tokens` = '0.5': expected an integer"):
        parse_sampling_parameters('{"max_tokens": "0.5"}')
    with pytest.raises(InvalidGenerationRequest, match=r"`max_tokens` = '1_0': expected an integer"):
        parse_sampling_parameters('{"max_tokens": "1_0"}')  # Python's int() reads 10 (a review, 2026-12-07)
    with pytest.raises(InvalidGenerationRequest, match=r"`temperature` = 'warm': expected a number"):
        parse_sampling_parameters('{"temperature": "warm"}')
    with pytest.raises(InvalidGenerationRequest, match=r"`top_p` = 'nan'"):
        parse_sampling_parameters('{"top_p": "nan"}')
    with pytest.raises(InvalidGenerationRequest, match=r"unknown fields \['stream'\]"):
        parse_sampling_parameters('{"stream": true}')  # in the sampling_parameters input it is a typo'd field


def test_fields_from_the_requests_own_parameters_are_named_as_such():
    """The generate endpoint's "parameters" arrive as the request's parameters, not an input."""
    from serving.generation.requests import FROM_REQUEST

    with pytest.raises(InvalidGenerationRequest, match=r"^the request's parameters `priority` = 7: expected 1"):
        parse_sampling_parameters('{"priority": 7}', FROM_REQUEST)


def test_the_prompt_text_is_the_raw_text_or_the_chat_prompt_and_a_stray_system_prompt_is_refused():
    """An empty user turn is a chat prompt (vLLM takes it); raw text must not be empty; a system_prompt
    without the template was accepted and ignored, so the caller's instructions silently did nothing."""
    from serving.generation.chat import render_chat_prompt
    from serving.generation.requests import prompt_text_for

    assert prompt_text_for("Hi", False, None, "default") == "Hi"
    assert prompt_text_for("Hi", True, None, "default") == render_chat_prompt("Hi", "default")
    assert prompt_text_for("Hi", True, "Be brief.", "default") == render_chat_prompt("Hi", "Be brief.")
    assert prompt_text_for("", True, None, "default") == render_chat_prompt("", "default")
    with pytest.raises(InvalidGenerationRequest, match="text_input is empty"):
        prompt_text_for("", False, None, "default")
    with pytest.raises(InvalidGenerationRequest, match="system_prompt is used only with apply_chat_template = true"):
        prompt_text_for("Hi", False, "You are a pirate.", "default")
    assert prompt_text_for("Hi", False, "", "default") == "Hi"  # an empty field asks for nothing


def test_prompt_and_max_tokens_are_checked_against_the_context():
    with pytest.raises(InvalidGenerationRequest, match="text_input is empty"):
        build_request("a", (), {}, max_context=32)
    with pytest.raises(InvalidGenerationRequest, match="the prompt is 40 tokens; the model's context is 32"):
        build_request("a", tuple(range(40)), {}, max_context=32)
    with pytest.raises(InvalidGenerationRequest, match=r"`max_tokens` = 1000000: .* at most 22 output tokens fit"):
        build_request("a", tuple(range(10)), {"max_tokens": 1_000_000}, max_context=32)
    request = build_request("a", (1, 2), {"max_tokens": 4, "deadline_ms": 1500, "priority": 1}, max_context=32)
    assert request.deadline_s == 1.5 and request.priority == 1 and request.sampling.greedy
    assert request.queue_timeout_s is None  # no Triton timeout: waits as long as it takes
    assert build_request("a", (1, 2), {}, max_context=32, queue_timeout_us=250_000).queue_timeout_s == 0.25


def test_greedy_sampling_is_argmax_and_seeded_sampling_is_reproducible():
    logits = np.array([0.1, 3.0, 2.9, -1.0], dtype=np.float32)
    assert sample_token(logits, SamplingParams(), new_rng(SamplingParams())) == 1
    params = SamplingParams(temperature=1.0, top_k=2, seed=5)
    draws = [sample_token(logits, params, new_rng(params)) for _ in range(3)]
    assert len(set(draws)) == 1 and draws[0] in (1, 2)


def test_a_tiny_temperature_samples_greedily_instead_of_failing_the_step():
    """1e-310 passed validation, overflowed logits / temperature to inf and made the probabilities NaN;
    the exception failed the engine's whole step, every running request with it."""
    logits = np.array([0.1, 3.0, 2.9, -1.0], dtype=np.float32)
    for temperature in (1e-310, 1e-6):
        params = SamplingParams(**parse_sampling_parameters(f'{{"temperature": {temperature}}}'))
        assert params.greedy and sample_token(logits, params, new_rng(params)) == 1
    tiny_but_sampled = SamplingParams(temperature=2e-5, top_k=3, seed=1)  # above the threshold: scaled, still finite
    assert sample_token(logits, tiny_but_sampled, new_rng(tiny_but_sampled)) == 1


def test_without_max_tokens_the_default_is_cut_to_the_room_the_context_leaves():
    """A prompt of 1009-1023 tokens with no max_tokens was refused, blaming a max_tokens never sent."""
    request = build_request("a", tuple(range(28)), {}, max_context=32)
    assert request.sampling.max_tokens == 4
    with pytest.raises(InvalidGenerationRequest, match=r"`max_tokens` = 16: .* at most 4 output tokens fit"):
        build_request("a", tuple(range(28)), {"max_tokens": 16}, max_context=32)


def test_incremental_detokenizer_holds_back_an_incomplete_utf8_character():
    table = {1: b"Gr", 2: b"\xc3", 3: b"\xbc", 4: b"n"}
    decode = lambda ids: b"".join(table[i] for i in ids).decode("utf-8", errors="replace")
    detok = IncrementalDetokenizer(decode)
    chunks = [detok.push(1), detok.push(2), detok.push(3), detok.push(4), detok.flush()]
    assert chunks == ["Gr", "", "ü", "n", ""] and "".join(chunks) == detok.text == "Grün"


def test_a_character_left_incomplete_at_the_end_is_dropped_not_streamed_as_a_replacement_character():
    """max_tokens (or the context, a deadline) can end a generation between the tokens of one
    character, e.g. after two of an emoji's three byte-level tokens: nothing completes it, and the
    stream and the whole text end before it, as vLLM's, never with a U+FFFD."""
    table = {1: "ok ".encode(), 2: b"\xf0\x9f", 3: b"\x8e", 4: b"\x89"}  # 🎉 = f0 9f 8e 89
    decode = lambda ids: b"".join(table[i] for i in ids).decode("utf-8", errors="replace")
    detok = IncrementalDetokenizer(decode)
    chunks = [detok.push(1), detok.push(2), detok.push(3), detok.flush()]
    assert chunks == ["ok ", "", "", ""] and "\ufffd" not in "".join(chunks)
    whole = IncrementalDetokenizer(decode)
    assert [whole.push(t) for t in (1, 2, 3, 4)] + [whole.flush()] == ["ok ", "", "", "🎉", ""]


def test_kv_sizing_follows_the_70_percent_rule_less_the_engine():
    layout = KvLayout(layers=30, kv_heads=3, head_dim=64, block_size=16)
    assert layout.stored_bytes_per_block == 737_280
    sizing = plan_kv_blocks(memory_mb=6144, models_in_partition=2, engine_bytes=1200 * 2**20, layout=layout,
                            max_running=8, max_context=1024)
    expected = (int(6144 * 2**20 * 0.7 / 2) - 1200 * 2**20) // (2 * 737_280)
    assert sizing.num_blocks == min(expected, 2 * 8 * 64) and sizing.bound_by in ("memory", "cap")


def test_int8_kv_stores_a_byte_per_value_plus_a_scale_per_head_and_token():
    fp32 = KvLayout(30, 3, 64, 16, "fp32")
    int8 = KvLayout(30, 3, 64, 16, "int8")
    assert int8.stored_bytes_per_block == fp32.values_per_block + 2 * 30 * 3 * 16 * 4
    assert int8.stored_bytes_per_block / fp32.stored_bytes_per_block < 0.27


def test_kv_sizing_names_the_fix_when_not_even_one_sequence_fits():
    with pytest.raises(GenerationError, match="Raise the partition's memory_mb"):
        plan_kv_blocks(512, 2, 200 * 2**20, KvLayout(30, 3, 64), max_running=8, max_context=1024)


def test_kv_store_gathers_what_was_written_across_blocks_fp32_and_int8():
    rng = np.random.default_rng(0)
    for dtype in ("fp32", "int8"):
        layout = KvLayout(layers=2, kv_heads=3, head_dim=4, block_size=4, dtype=dtype)
        store = KvStore(layout, num_blocks=6)
        keys = rng.uniform(-1, 1, (2, 3, 7, 4)).astype(np.float32)
        values = rng.uniform(-1, 1, (2, 3, 7, 4)).astype(np.float32)
        store.write([5, 2], 0, keys[:, :, :3], values[:, :, :3])
        store.write([5, 2], 3, keys[:, :, 3:], values[:, :, 3:])
        past_k, past_v, past = store.gather([[5, 2], [1]], [7, 0])
        assert past == 8 and past_k.shape == (2, 2, 3, 8, 4)  # whole blocks; position 7 and row 1 are zeros
        tolerance = 0 if dtype == "fp32" else 1.0 / 127
        np.testing.assert_allclose(past_k[:, 0, :, :7], keys, atol=tolerance)
        np.testing.assert_allclose(past_v[:, 0, :, :7], values, atol=tolerance)
        assert not past_k[:, 0, :, 7].any() and not past_k[:, 1].any() and np.isfinite(past_v).all()


def test_generation_config_is_decoupled_with_the_vllm_tensor_names():
    from contracts.model_config import config_text, parse_config

    config = parse_config(config_text(render_generation_config(ModelSpec(name="llm", recipe="smollm2_gguf"), {"num_blocks": "10"})))
    assert config.model_transaction_policy.decoupled and config.max_batch_size == 0
    names = {t.name for t in (*config.input, *config.output)}
    assert {"text_input", "stream", "sampling_parameters", "exclude_input_in_output", "text_output", "finish_reason"} <= names
    assert [t.name for t in config.input if not t.optional] == ["text_input"]
    assert config.parameters["num_blocks"].string_value == "10"


def test_a_prompt_longer_than_any_context_could_hold_is_refused_before_tokenizing():
    from serving.generation.requests import check_prompt_size, prompt_bytes_limit

    limit = prompt_bytes_limit(4, ["a", "hello", "Ġworld"])  # longest entry: 7 UTF-8 bytes
    assert limit == 28
    check_prompt_size("x" * 28, limit, 4)
    with pytest.raises(InvalidGenerationRequest, match=r"the prompt is 29 bytes; the model's context is 4 tokens, and no token "
                                                       r"covers more than 7 bytes, so a prompt of more than 28 bytes cannot fit"):
        check_prompt_size("x" * 29, limit, 4)


def test_stop_strings_cut_the_text_before_the_first_and_stream_no_part_of_one():
    from serving.generation.detokenize import StopStrings

    pieces = ["Hello", " wor", "ld. The", " end", "."]
    out = StopStrings(["world.", "The end"])
    streamed = [out.push(p) for p in pieces]
    assert out.stopped and out.text == "Hello " and "".join(streamed) + out.flush() == "Hello "
    assert all("wor" not in chunk for chunk in streamed)  # a stop string's start is held back, never streamed
    # across pieces, earliest match wins; nothing after a stop is taken
    out = StopStrings(["\n\n", "C"])
    assert out.push("A\n") == "A" and out.push("\nB C") == "" and out.text == "A" and out.push("more") == ""
    # no stop strings: everything passes through at once
    plain = StopStrings()
    assert [plain.push(p) for p in pieces] == pieces and plain.flush() == "" and not plain.stopped
    # held back text is released at the end when no stop string came
    held = StopStrings(["xyz"])
    assert held.push("abcxy") == "abc" and held.flush() == "xy" and held.text == "abcxy"


@pytest.mark.parametrize("value, ok", [("\n", True), (["a", "bb"], True), ("", False), (["a"] * 5, False),
                                       (["x" * 65], False), ([1], False)])
def test_stop_is_a_string_or_a_short_list_of_them(value, ok):
    import json

    if ok:
        fields = parse_sampling_parameters(json.dumps({"stop": value}))
        request = build_request("a", (1, 2), fields, max_context=32)
        assert request.sampling.stop == ((value,) if isinstance(value, str) else tuple(value))
    else:
        with pytest.raises(InvalidGenerationRequest, match=r"`stop` = .*: expected a non-empty string or a list of 1 to 4"):
            parse_sampling_parameters(json.dumps({"stop": value}))


@pytest.mark.parametrize("setting, named", [
    ({"instance_count": 2}, r"`models.llm.instance_count` = 2 is not served .* allowed 1"),
    ({"device": "gpu"}, r"`models.llm.device` = 'gpu' is not served"),
    ({"variant": "int8_mixed"}, r"`models.llm.variant` = 'int8_mixed' is not served"),
    ({"max_queue_delay_microseconds": 5000}, r"`models.llm.max_queue_delay_microseconds` is not served"),
    ({"preferred_batch_sizes": [8]}, r"`models.llm.preferred_batch_sizes` is not served"),
])
def test_settings_the_generation_model_cannot_honour_are_refused_not_ignored(setting, named):
    """The config has one KIND_CPU instance and no batcher whatever serving.toml says: a setting that
    would change that is refused naming it (instance_count = 2 used to serve one instance in silence)."""
    from contracts.errors import ConfigError

    with pytest.raises(ConfigError, match=named):
        render_generation_config(ModelSpec(name="llm", recipe="smollm2_gguf", **setting), {})


def test_prompt_token_ids_are_encodes_without_special_tokens():
    """Through `encode_batch` (which lets go of the GIL), the same ids as `encode` without the
    tokenizer's own special tokens (the chat template writes its own)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from tokenizers.processors import TemplateProcessing

    from serving.generation.requests import prompt_token_ids

    tokenizer = Tokenizer(WordLevel({"<unk>": 0, "<s>": 1, "hello": 2, "world": 3}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = Whitespace()
    tokenizer.post_processor = TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    assert tokenizer.encode("hello world").ids == [1, 2, 3]  # the template adds <s> by default
    assert prompt_token_ids(tokenizer, "hello world again") == (2, 3, 0)
    assert prompt_token_ids(tokenizer, "hello world again") == tuple(tokenizer.encode("hello world again", add_special_tokens=False).ids)


@pytest.mark.built
def test_an_over_long_prompt_is_refused_from_its_head_and_only_when_the_whole_cannot_fit():
    """The head check refuses 165,000 digits after ~16 KB of tokenizing; on 2,000 random prompts of
    mixed text (words, digits, white space runs, CJK, emoji, the chat template's special tokens) with
    a context of 64 tokens it refuses only prompts whose whole tokenization is over the context, and
    a prompt it lets through gets exactly the ids of a plain encode."""
    import random

    from tokenizers import Tokenizer

    from contracts.layout import MODEL_REPOSITORY
    from serving.generation.requests import prompt_token_ids

    tokenizer = Tokenizer.from_file(str(MODEL_REPOSITORY / "smollm2_chat" / "1" / "tokenizer.json"))
    with pytest.raises(InvalidGenerationRequest, match=r"the prompt is at least 16366 tokens \(its first 16384 characters "
                                                       r"alone are about 16384\); the model's context is 1024 tokens"):
        prompt_token_ids(tokenizer, "7" * 165_000, max_context=1024)
    rng = random.Random(0)
    parts = ["hello", " world", "  ", "\n\n", "1234567", " ", "中文字符", "🙂👍🏽", "<|im_start|>", "<|im_end|>", "user",
             "supercalifragilistic", ".", ",", "\t", "aaaaaaaaaaaaaaaa", "Ġ", "é"]
    refused = 0
    for _ in range(2000):
        text = "".join(rng.choice(parts) for _ in range(rng.randint(150, 700)))
        whole = tokenizer.encode(text, add_special_tokens=False).ids
        try:
            ids = prompt_token_ids(tokenizer, text, max_context=64)
        except InvalidGenerationRequest:
            refused += 1
            assert len(whole) >= 64, text
        else:
            assert list(ids) == whole
    assert refused > 100  # the head check did refuse, soundly


def test_the_request_parameters_beside_the_sampling_parameters_input_are_read_and_checked_not_ignored():
    from serving.generation.requests import FROM_REQUEST, merge_sampling_fields, parse_sampling_parameters

    from_input = parse_sampling_parameters('{"temperature": 0}')
    from_request = parse_sampling_parameters('{"max_tokens": 3, "stop": "and"}', FROM_REQUEST)
    assert merge_sampling_fields(from_input, from_request) == {"temperature": 0, "max_tokens": 3, "stop": "and"}
    with pytest.raises(InvalidGenerationRequest, match=r"\['max_tokens'\] set both in sampling_parameters and in the "
                                                       r"request's parameters; expected each field in one"):
        merge_sampling_fields(parse_sampling_parameters('{"max_tokens": 5}'), from_request)
    with pytest.raises(InvalidGenerationRequest, match=r"unknown fields \['bogus_field'\]"):
        parse_sampling_parameters('{"max_tokens": 3, "bogus_field": 1}', FROM_REQUEST)


def test_a_seed_that_triton_turned_into_a_double_is_refused_with_where_to_send_it_instead():
    from serving.generation.requests import FROM_REQUEST, parse_sampling_parameters

    with pytest.raises(InvalidGenerationRequest, match=r"send it in the sampling_parameters input"):
        parse_sampling_parameters('{"seed": 1.8446744073709552e+19}', FROM_REQUEST)
    assert parse_sampling_parameters('{"seed": 18446744073709551615}')["seed"] == 2**64 - 1


def test_a_long_stop_string_is_reported_with_its_own_length():
    from serving.generation.requests import parse_sampling_parameters

    with pytest.raises(InvalidGenerationRequest, match=r"\(65 characters\)"):
        parse_sampling_parameters('{"stop": "' + "x" * 65 + '"}')
