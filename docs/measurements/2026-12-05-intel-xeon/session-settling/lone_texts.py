"""The probes' lone held-out texts, tokenized by the served backend's own front-end
(serving.backend.text_frontend, as text_embedder's config sets it: 128 tokens, [PAD] 0)."""
import json, sys
sys.path.insert(0, "/work/main/scripts")
import numpy as np
from serving.backend.text_frontend import TextFrontEnd
MODEL = "/work/main/model_repository/text_embedder/1/model.onnx"
HELDOUT = json.load(open("/work/main/artifacts/text_encoder/text_corpus.json"))["heldout"]


def lone_feeds(session, texts):
    """One feeds dict per text, for `session`'s inputs."""
    names = [i.name for i in session.get_inputs()]
    front = TextFrontEnd("/work/main/model_repository/text_embedder/1/tokenizer.json", 128, 0, names)
    return list(front.tokenize([np.array([[t.encode()]], dtype=object) for t in texts]).tensors)
