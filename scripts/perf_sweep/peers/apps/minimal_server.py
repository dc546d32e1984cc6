"""The minimal peer: what a newcomer writes in twenty lines with FastAPI and ONNX Runtime.

One ONNX Runtime call per request, no batching, no queue: `def` endpoints (FastAPI runs them in
its thread pool), uvicorn with one worker, ONNX Runtime threads = the machine's cores. It speaks
the same KServe v2 JSON as Triton on the same paths, so the load generator sends every target
the same bytes. Text: tokenize (truncation at `--max-length`) + one call per text.

Runs in .venv/peers (fastapi, uvicorn) and imports nothing from this project:
    .venv/peers/bin/python scripts/perf_sweep/peers/apps/minimal_server.py --port 9000 \
        --digits-onnx model_repository/digit_classifier/1/model.onnx \
        --text-onnx model_repository/text_encoder/1/model.onnx \
        --tokenizer model_repository/text_tokenizer/1/tokenizer.json
"""
import argparse
import os

import numpy as np
import onnxruntime as ort
import uvicorn
from fastapi import FastAPI
from tokenizers import Tokenizer


def session(path: str, threads: int) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def v2_response(model: str, name: str, array: np.ndarray) -> dict:
    return {"model_name": model, "outputs": [{"name": name, "datatype": "FP32", "shape": list(array.shape),
                                              "data": array.ravel().tolist()}]}


def create_app(digits_onnx: str, text_onnx: str, tokenizer_json: str, max_length: int, threads: int) -> FastAPI:
    app = FastAPI()
    digits = session(digits_onnx, threads)
    encoder = session(text_onnx, threads)
    tokenizer = Tokenizer.from_file(tokenizer_json)
    tokenizer.enable_truncation(max_length)
    tokenizer.no_padding()

    @app.get("/v2/health/ready")
    def ready() -> dict:
        return {}

    @app.post("/v2/models/digit_classifier/infer")
    def classify(body: dict) -> dict:
        tensor = body["inputs"][0]
        image = np.asarray(tensor["data"], dtype=np.float32).reshape(tensor["shape"])
        (probabilities,) = digits.run(None, {"image": image})
        return v2_response("digit_classifier", "probabilities", probabilities)

    @app.post("/v2/models/text_embedder/infer")
    def embed(body: dict) -> dict:
        encoding = tokenizer.encode(body["inputs"][0]["data"][0])
        feed = {"input_ids": np.array([encoding.ids], dtype=np.int64),
                "attention_mask": np.array([encoding.attention_mask], dtype=np.int64)}
        (embedding,) = encoder.run(None, feed)
        return v2_response("text_embedder", "embedding", embedding)

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--digits-onnx", required=True)
    parser.add_argument("--text-onnx", required=True)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="ONNX Runtime intra-op threads (default: cores)")
    args = parser.parse_args()
    app = create_app(args.digits_onnx, args.text_onnx, args.tokenizer, args.max_length, args.threads)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
