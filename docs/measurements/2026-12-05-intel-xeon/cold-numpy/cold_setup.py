"""What the cold_*.py probes share. Run them from /work/main with .venv/bin/python.

Cold = timed right after an ONNX Runtime call of the served text encoder (the weights have just gone
through the caches, as in the backend's stub between calls); warm = timed in a tight loop."""
import json
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, "scripts")
from contracts.onnx_sessions import served_session  # noqa: E402
from contracts.sequence_buckets import parse_bucket_boundaries  # noqa: E402
from serving.backend.batch_execution import BatchLayout  # noqa: E402
from serving.backend.text_frontend import TextFrontEnd  # noqa: E402

SERVED = "model_repository/text_embedder/1/"
LONE_TEXT = np.array([[b"The quick brown fox jumps over the lazy dog near the river bank today."]], dtype=object)


class Served:
    """The served encoder as one session of `threads`, its tokenizer front-end and bucketing layout."""

    def __init__(self, threads: int):
        self.session = served_session(SERVED + "model.onnx", threads)
        self.names = [i.name for i in self.session.get_inputs()]
        self.outputs = [o.name for o in self.session.get_outputs()]
        self.frontend = TextFrontEnd(SERVED + "tokenizer.json", 128, 0, self.names)
        self.layout = BatchLayout(tuple(self.names), 0, parse_bucket_boundaries("16,24,32,48,64,96,128"), "attention_mask")

    def cold(self, label: str, step, feeds, calls: int, warm: bool = False) -> None:
        """Median of `step` right after a call of the encoder on `feeds` (and in a loop when `warm`)."""
        after_a_call = []
        for _ in range(calls):
            self.session.run(self.outputs, feeds)
            start = time.perf_counter()
            step()
            after_a_call.append((time.perf_counter() - start) * 1e6)
        line = f"{label:34s} cold {statistics.median(after_a_call):7.1f} us"
        if warm:
            looped = []
            for _ in range(calls):
                start = time.perf_counter()
                step()
                looped.append((time.perf_counter() - start) * 1e6)
            line += f"   warm {statistics.median(looped):7.1f} us"
        print(line)


def heldout_texts(count: int | None = None) -> list[str]:
    texts = json.load(open("artifacts/text_encoder/text_corpus.json"))["heldout"]
    return texts if count is None else texts[:count]


def as_requests(texts) -> list[np.ndarray]:
    """One TEXT tensor ([1, 1] bytes) per text, as Triton hands them to the backend."""
    return [np.array([[t.encode()]], dtype=object) for t in texts]
