"""Single numpy calls on a [1, 18] mask, cold (cold_setup.py)."""
import numpy as np
from cold_setup import Served

served = Served(threads=2)
shapes = {"input_ids": np.ones((1, 18), np.int64), "attention_mask": np.ones((1, 18), np.int64),
          "token_type_ids": np.zeros((1, 18), np.int64)}
feeds = {name: shapes[name] for name in served.names}
m = feeds["attention_mask"]
for label, step in [
    ("nothing", lambda: None), ("m[:, -1].all()", lambda: m[:, -1].all()), ("m[0, -1] != 0", lambda: m[0, -1] != 0),
    ("np.full(1, 18)", lambda: np.full(1, 18, dtype=np.int64)), ("np.array([18])", lambda: np.array([18], dtype=np.int64)),
    ("m.shape", lambda: m.shape), ("np.asarray(m)", lambda: np.asarray(m)), ("m != 0", lambda: m != 0),
    ("int(m.sum())", lambda: int(m.sum())), ("np.count_nonzero(m)", lambda: np.count_nonzero(m)),
    ("int(np.count_nonzero(m))", lambda: int(np.count_nonzero(m))), ("m.size", lambda: m.size),
    ("m[0:1]", lambda: m[0:1]), ("np.isfinite(o).all()", lambda: np.isfinite(m).all()),
]:
    served.cold(label, step, feeds, calls=1500)
