"""The per-request input contract of the onnxruntime_cpu backend, derived from real ONNX graphs."""
from __future__ import annotations

import numpy as np
import pytest

from contracts.sequence_buckets import is_mask_input
from serving.backend.input_contract import IdRange, InputContract, InputRule, contract_from_onnx, gather_id_ranges
from tiny_onnx_models import VOCAB, masked_embedding_model

TEXT_INPUTS = [("input_ids", [-1]), ("attention_mask", [-1])]


@pytest.fixture(scope="module")
def contract():
    return contract_from_onnx(masked_embedding_model(), TEXT_INPUTS, max_sequence_length=8)


def request(ids, mask=None):
    ids = np.asarray(ids, np.int64)
    return {"input_ids": ids, "attention_mask": np.ones_like(ids) if mask is None else np.asarray(mask, np.int64)}


def test_id_range_is_read_from_the_gather_table_the_input_indexes():
    ranges = gather_id_ranges(masked_embedding_model())
    assert ranges == {"input_ids": IdRange(0, VOCAB - 1, "the model's lookup table 'table' has 10 rows")}


def test_ids_reaching_a_gather_only_through_arithmetic_get_no_range():
    """Mul is not a pass-through op: the contract does not guess; isolation handles such failures."""
    assert gather_id_ranges(masked_embedding_model(ids_through_mul=True)) == {}


def test_the_served_text_encoder_graph_yields_the_vocabulary_range():
    import onnx

    from conftest import REPOSITORY

    path = REPOSITORY / "text_encoder" / "1" / "model.onnx"
    if not path.exists():
        pytest.skip(f"{path} is not built (make build-engines)")
    ranges = gather_id_ranges(onnx.load(str(path), load_external_data=False))
    assert ranges["input_ids"].low == 0 and ranges["input_ids"].high == 30521
    assert "attention_mask" not in ranges


def test_masks_are_found_by_name_or_by_the_length_input_parameter(contract):
    rules = {r.name: r for r in contract.inputs}
    assert rules["attention_mask"].binary_mask and not rules["input_ids"].binary_mask
    assert is_mask_input("token_mask") and is_mask_input("lengths", ["lengths"]) and not is_mask_input("input_ids")


def test_a_valid_request_has_no_problem(contract):
    assert contract.problem(request([[1, 2, 3]])) is None
    assert contract.problem(request([[1, 2, 0], [4, 0, 0]], [[1, 1, 0], [1, 0, 0]])) is None


@pytest.mark.parametrize("ids, mask, pattern", [
    ([[1, 10000000, 2]], None, r"invalid input 'input_ids': 1 of 3 values outside \[0, 9\] \(first: 10000000 at \[0, 1\]\); expected ids in that range \(the model's lookup table 'table' has 10 rows\)"),
    ([[1, -1, 2]], None, r"'input_ids': 1 of 3 values outside \[0, 9\] \(first: -1 at \[0, 1\]\)"),
    ([[1, 2, 3]], [[1, 2, 1]], r"'attention_mask': 1 values are neither 0 nor 1 \(first: 2 at \[0, 1\]\); expected a 0/1 mask"),
    ([[1, 2, 3]], [[0, 0, 0]], r"'attention_mask': row 0 has no 1; expected at least one real token"),
    ([[1, 2, 3]], [[1] * 8], r"disagree in shape \('input_ids' \[1, 3\], 'attention_mask' \[1, 8\]\); expected the same shape"),
    ([[1] * 9], None, r"'input_ids': 9 tokens per row; expected at most 8 \(the model's maximum sequence length"),
    (np.zeros((1, 0), np.int64), None, r"'input_ids': shape \[1, 0\] has an empty variable axis; expected at least 1"),
    (np.zeros((0, 3), np.int64), None, r"'input_ids': shape \[0, 3\] carries no rows"),
])
def test_each_broken_rule_is_named_with_the_expected_form(contract, ids, mask, pattern):
    import re

    message = contract.problem(request(ids, mask))
    assert message is not None and re.search(pattern, message), message
    assert "\n" not in message


def test_non_finite_floats_are_refused_unless_turned_off():
    image = {"image": np.array([[np.nan, 1.0]], np.float32)}
    rules = (InputRule("image", (2,)),)
    assert "1 NaN and 0 Inf" in InputContract(rules).problem(image)
    assert InputContract(rules, reject_non_finite=False).problem(image) is None


def test_max_sequence_length_must_be_positive():
    with pytest.raises(ValueError, match="max_sequence_length = 0"):
        InputContract((), max_sequence_length=0)


def test_an_array_without_the_batch_dimension_is_named_not_an_index_error(contract):
    """Triton 2.51 drops a batch dimension of 0 it was sent ([0, 3] with 3 values reaches the backend
    as [3]): the check used to raise IndexError inside `execute`, failing the request's whole batch."""
    problem = contract.problem({"input_ids": np.array([1, 2, 3], np.int64), "attention_mask": np.ones(3, np.int64)})
    assert problem and "received 1 dimensions [3]; expected 2" in problem, problem


def test_named_mask_inputs_replace_the_naming_rule():
    """With the config's mask inputs given (a brought model), an input named `*mask` is not a 0/1 mask."""
    named = contract_from_onnx(masked_embedding_model(), TEXT_INPUTS, mask_inputs=(), max_sequence_length=8)
    assert not {r.name: r for r in named.inputs}["attention_mask"].binary_mask
    assert named.problem(request([[1, 2, 3]], [[0, 3, 1]])) is None


def test_an_input_batched_by_equal_shapes_is_held_to_its_largest_dims_and_not_to_agreement():
    """`max_input_dims` (an image of any height and width): a request over them in any axis is refused
    naming them; nothing is padded (padded=False), so variable inputs of different shapes may meet."""
    rules = (InputRule("x", (3, -1, -1), max_dims=(3, 24, 32)), InputRule("scale", (-1,)))
    contract = InputContract(rules, padded=False)
    fine = {"x": np.zeros((2, 3, 24, 8), np.float32), "scale": np.ones((2, 5), np.float32)}
    assert contract.problem(fine) is None
    over = contract.problem({**fine, "x": np.zeros((1, 3, 25, 8), np.float32)})
    assert over and "'x': shape [1, 3, 25, 8] is over its largest dims ['rows', 3, 24, 32]" in over, over
    assert "disagree in shape" in InputContract(rules).problem(fine)  # padded: the token rule holds


def test_max_dims_reach_the_contract_from_the_config():
    from onnx import TensorProto, helper

    from tiny_onnx_models import checked_model

    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 3, "h", "w"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 3, "h", "w"])])
    contract = contract_from_onnx(checked_model(graph), [("x", [3, -1, -1])], max_dims={"x": [3, 8, 8]}, padded=False)
    assert contract.inputs[0].max_dims == (3, 8, 8) and not contract.padded


def test_where_nothing_is_padded_the_graphs_named_axes_must_agree_within_a_request():
    """Equal-shape batching (no mask declared): ids and mask of one request at different lengths were a
    500 carrying ONNX Runtime's broadcast error; the graph names both axes `sequence`, so it is a 400."""
    contract = contract_from_onnx(masked_embedding_model(), TEXT_INPUTS, mask_inputs=(), padded=False)
    assert {r.name: r.axis_names for r in contract.inputs} == {"input_ids": ("sequence",), "attention_mask": ("sequence",)}
    assert contract.problem(request([[1, 2, 3]])) is None
    problem = contract.problem(request([[1, 2, 3]], [[1, 1, 1, 1]]))
    assert problem and "sharing the model's axis 'sequence' disagree in its length ('input_ids' [1, 3], 'attention_mask' [1, 4])" in problem
