"""The sampling record the client sends and the server reads (contracts.sampling)."""
import json

from contracts.sampling import DEFAULT_MAX_TOKENS, SamplingFields
from model_client.generate import GenerationSettings
from serving.generation.requests import SamplingParams, parse_sampling_parameters


def test_defaults_are_vllms_and_only_changed_fields_travel_beside_max_tokens_and_temperature():
    assert SamplingFields().sampling_json_fields() == {"max_tokens": DEFAULT_MAX_TOKENS, "temperature": 0.0}
    fields = SamplingFields(max_tokens=5, top_k=3, seed=0, stop=("\n",)).sampling_json_fields()
    assert fields == {"max_tokens": 5, "temperature": 0.0, "top_k": 3, "seed": 0, "stop": ["\n"]}


def test_what_the_client_sends_the_server_reads_back_field_for_field():
    sent = GenerationSettings(max_tokens=7, temperature=0.5, top_p=0.9, top_k=4, seed=11, ignore_eos=True,
                              stop=("END", "\n\n"), priority=1, deadline_ms=250)
    read = parse_sampling_parameters(sent.sampling_parameters())
    assert read["priority"] == 1 and read["deadline_ms"] == 250
    params = SamplingParams(**SamplingParams.values_from_json(read))
    assert [getattr(params, f) for f in ("max_tokens", "temperature", "top_p", "top_k", "seed", "ignore_eos", "stop")] == \
        [7, 0.5, 0.9, 4, 11, True, ("END", "\n\n")]


def test_values_from_json_converts_types_and_leaves_absent_fields_to_the_defaults():
    values = SamplingFields.values_from_json({"temperature": 1, "stop": "x", "seed": None})
    assert values == {"temperature": 1.0, "stop": ("x",)} and isinstance(values["temperature"], float)
    assert SamplingParams(**values).top_p == 1.0 and json.dumps(SamplingParams(**values).sampling_json_fields())


def test_one_stop_string_and_a_list_of_them_become_the_same_tuple_shape():
    from contracts.sampling import stop_strings

    assert stop_strings("\n\n") == ("\n\n",) and stop_strings(["a", "b"]) == ("a", "b") and stop_strings([]) == ()
