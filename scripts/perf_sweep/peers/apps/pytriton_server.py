"""The PyTriton peer: the same ONNX files behind PyTriton's `@batch` and Triton's dynamic batcher.

What a user of NVIDIA's PyTriton writes: one Python function per model, decorated with `@batch`,
bound with a `DynamicBatcher` (PyTriton's default `max_queue_delay_microseconds` = 0 unless
`--max-queue-delay-us` says otherwise), one instance per model, ONNX Runtime threads = the
machine's cores. Text: tokenize the batch (truncation at `--max-length`), pad to the batch's
longest text, one ONNX Runtime call per batch. Served under the same names and KServe v2 JSON as
this project (`digit_classifier`: image FP32 [1,8,8] -> probabilities [10]; `text_embedder`:
TEXT BYTES [1] -> embedding [384]).

Runs with the main .venv's nvidia-pytriton (the genuine Triton 2.51 it bundles) and imports
nothing from this project:
    .venv/bin/python scripts/perf_sweep/peers/apps/pytriton_server.py --http-port 9000 --grpc-port 9001 \
        --metrics-port 9002 --digits-onnx ... --text-onnx ... --tokenizer ...
"""
import argparse
import os

import numpy as np
import onnxruntime as ort
from pytriton.decorators import batch
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig
from tokenizers import Tokenizer


def session(path: str, threads: int) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def bind_models(triton: Triton, args: argparse.Namespace) -> None:
    digits = session(args.digits_onnx, args.threads)
    encoder = session(args.text_onnx, args.threads)
    tokenizer = Tokenizer.from_file(args.tokenizer)
    tokenizer.enable_truncation(args.max_length)
    tokenizer.enable_padding(pad_id=0)  # pads each batch to its longest text

    @batch
    def classify(image):
        (probabilities,) = digits.run(None, {"image": image})
        return {"probabilities": probabilities}

    @batch
    def embed(TEXT):
        encodings = tokenizer.encode_batch([row[0].decode("utf-8") for row in TEXT])
        feed = {"input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
                "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64)}
        (embedding,) = encoder.run(None, feed)
        return {"embedding": embedding}

    batcher = DynamicBatcher(max_queue_delay_microseconds=args.max_queue_delay_us)
    triton.bind(model_name="digit_classifier", infer_func=classify,
                inputs=[Tensor(name="image", dtype=np.float32, shape=(1, 8, 8))],
                outputs=[Tensor(name="probabilities", dtype=np.float32, shape=(10,))],
                config=ModelConfig(max_batch_size=args.max_batch_size, batcher=batcher))
    triton.bind(model_name="text_embedder", infer_func=embed,
                inputs=[Tensor(name="TEXT", dtype=bytes, shape=(1,))],
                outputs=[Tensor(name="embedding", dtype=np.float32, shape=(384,))],
                config=ModelConfig(max_batch_size=args.max_batch_size, batcher=batcher))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--grpc-port", type=int, required=True)
    parser.add_argument("--metrics-port", type=int, required=True)
    parser.add_argument("--digits-onnx", required=True)
    parser.add_argument("--text-onnx", required=True)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--max-batch-size", type=int, default=64)
    parser.add_argument("--max-queue-delay-us", type=int, default=DynamicBatcher().max_queue_delay_microseconds)
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="ONNX Runtime intra-op threads (default: cores)")
    parser.add_argument("--workspace", help="PyTriton's workspace (default: a new one under ~/.cache/pytriton)")
    args = parser.parse_args()
    config = TritonConfig(http_address=args.host, http_port=args.http_port, grpc_address=args.host,
                          grpc_port=args.grpc_port, metrics_port=args.metrics_port, allow_gpu_metrics=False)
    with Triton(config=config, workspace=args.workspace) as triton:
        bind_models(triton, args)
        triton.serve()


if __name__ == "__main__":
    main()
