"""Triton Python model `text_tokenizer`: UTF-8 strings in, the encoder's token tensors out.

A standalone tokenizer model (text in, token ids out); the served `text_embedder` runs the same
front-end (serving/backend/text_frontend.py) inside its one model. It uses the Hugging
Face `tokenizers` library and the tokenizer.json that `make build-engines` copies next to this
file (the one the encoder was exported and validated with).

Behaviour (the config.pbtxt is rendered by scripts/contracts/model_config.py):
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
* Every request of a dynamic batch is tokenized in one `encode_batch` call (Rust; one thread unless TOKENIZERS_PARALLELISM says otherwise); the
  rules live in serving/backend/text_frontend.py, shared with the fused `text_embedder`.
"""
import os
import sys

# The runtime's PYTHONPATH, which the stub's isolated Python ignores (why: the onnxruntime_cpu backend's model.py).
sys.path.extend(p for p in dict.fromkeys(os.environ.get("PYTHONPATH", "").split(os.pathsep)) if p and p not in sys.path)
import json

import triton_python_backend_utils as pb_utils

from serving.backend.checks import model_arguments
from serving.backend.text_frontend import SUPPORTED_OUTPUTS, TextFrontEnd


class TritonPythonModel:
    def initialize(self, args):
        config, params, version_dir = model_arguments(args)
        name = args["model_name"]
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
        self.input_name = config["input"][0]["name"]
        self.output_names = [t["name"] for t in config["output"]]
        unknown = [n for n in self.output_names if n not in SUPPORTED_OUTPUTS]
        if unknown:
            raise pb_utils.TritonModelException(f"model '{name}': outputs {unknown} are not produced; supported: {list(SUPPORTED_OUTPUTS)}.")
        self.frontend = TextFrontEnd(path, max_length, int(params.get("pad_id", "0") or 0), self.output_names)

    def execute(self, requests):
        tokenized = self.frontend.tokenize([pb_utils.get_input_tensor_by_name(r, self.input_name).as_numpy() for r in requests])
        responses = []
        for tensors, problem in zip(tokenized.tensors, tokenized.problems):
            if problem is not None:  # a NEW TritonError per response (docs/operations.md)
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(problem, pb_utils.TritonError.INVALID_ARG)))
            else:
                responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(n, a) for n, a in tensors.items()]))
        return responses
