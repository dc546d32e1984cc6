"""Triton Python model `text_tokenizer`: UTF-8 strings in, the encoder's token tensors out.

The first step of the `text_embedder` ensemble, so clients send plain text. It uses the Hugging
Face `tokenizers` library and the tokenizer.json that `make build-engines` copies next to this
file (the one the encoder was exported and validated with).

Behaviour (the config.pbtxt is rendered by scripts/serving/model_config.py):
* Input `TEXT`, TYPE_STRING dims [1]: one text per batch row. Outputs: whichever of `input_ids`,
  `attention_mask`, `token_type_ids` the config lists (the encoder's inputs), INT64 [-1].
* Texts longer than `max_length` tokens (parameter; 128 for all-MiniLM-L6-v2, its training
  length) are truncated, special tokens included. Each request's rows are right-padded with the
  [PAD] id to that request's longest row; the encoder pads or buckets across requests.
* An empty or whitespace-only text is tokenized as sentence-transformers does ([CLS] [SEP]) and so
  gets the same, well-defined embedding as in-process inference. Non-ASCII text is normal input
  (accents are stripped and case folded by this uncased tokenizer; unknown symbols become [UNK]).
* Bytes that are not valid UTF-8 get an INVALID_ARG error naming the row and the byte offset; the
  other requests of the batch are still answered.
* Every request of a dynamic batch is tokenized in one `encode_batch` call (Rust, parallel).
"""
import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils
from tokenizers import Tokenizer

SUPPORTED_OUTPUTS = ("input_ids", "attention_mask", "token_type_ids")


def decode_texts(array):
    """Row texts of one request's [rows, 1] TEXT tensor; raises ValueError naming a bad row."""
    texts = []
    for row, item in enumerate(array.reshape(-1)):
        if isinstance(item, str):
            texts.append(item)
            continue
        try:
            texts.append(bytes(item).decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise ValueError(
                f"TEXT row {row} is not valid UTF-8 ({exc.reason} at byte {exc.start}); send text encoded as UTF-8."
            ) from None
    return texts


def padded_token_tensors(encodings, pad_id, names):
    """{name: int64 [rows, longest]} for the requested output names, right-padded."""
    width = max(len(e.ids) for e in encodings)
    rows = len(encodings)
    ids = np.full((rows, width), pad_id, dtype=np.int64)
    mask = np.zeros((rows, width), dtype=np.int64)
    types = np.zeros((rows, width), dtype=np.int64)
    for row, encoding in enumerate(encodings):
        n = len(encoding.ids)
        ids[row, :n] = encoding.ids
        mask[row, :n] = 1
        types[row, :n] = encoding.type_ids
    tensors = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    return {name: tensors[name] for name in names}


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}
        name = args["model_name"]
        version_dir = os.path.join(args["model_repository"], args["model_version"])
        tokenizer_file = params.get("tokenizer_file", "tokenizer.json")
        path = os.path.normpath(os.path.join(version_dir, tokenizer_file))
        if os.path.dirname(path) != os.path.normpath(version_dir):
            raise pb_utils.TritonModelException(f"model '{name}': tokenizer_file {tokenizer_file!r} must be a file name in the version directory.")
        if not os.path.exists(path):
            raise pb_utils.TritonModelException(f"model '{name}': {path} does not exist; run `make build-engines`.")
        try:
            max_length = int(params["max_length"])
        except (KeyError, ValueError):
            raise pb_utils.TritonModelException(f"model '{name}': parameter max_length must be an integer token count.") from None
        self.tokenizer = Tokenizer.from_file(path)
        self.tokenizer.enable_truncation(max_length)
        self.tokenizer.no_padding()
        self.pad_id = int(params.get("pad_id", "0") or 0)
        self.input_name = config["input"][0]["name"]
        self.output_names = [t["name"] for t in config["output"]]
        unknown = [n for n in self.output_names if n not in SUPPORTED_OUTPUTS]
        if unknown:
            raise pb_utils.TritonModelException(f"model '{name}': outputs {unknown} are not produced; supported: {list(SUPPORTED_OUTPUTS)}.")

    def execute(self, requests):
        per_request = []  # list of texts, or an error message
        for request in requests:
            array = pb_utils.get_input_tensor_by_name(request, self.input_name).as_numpy()
            try:
                per_request.append(decode_texts(array))
            except ValueError as exc:
                per_request.append(str(exc))
        all_texts = [t for texts in per_request if isinstance(texts, list) for t in texts]
        encodings = self.tokenizer.encode_batch(all_texts) if all_texts else []
        responses, start = [], 0
        for texts in per_request:
            if isinstance(texts, str):
                error = pb_utils.TritonError(texts, pb_utils.TritonError.INVALID_ARG)
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            tensors = padded_token_tensors(encodings[start:start + len(texts)], self.pad_id, self.output_names)
            start += len(texts)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(n, a) for n, a in tensors.items()]))
        return responses
