import sys, time, numpy as np
sys.path.insert(0, "/work/main/scripts")
from contracts.onnx_sessions import served_session
s = served_session("/work/main/model_repository/text_embedder/1/model.onnx", int(sys.argv[1]))
names = [i.name for i in s.get_inputs()]
def t(rows, width, n=60):
    feeds = {"input_ids": np.full((rows, width), 1000, np.int64), "attention_mask": np.ones((rows, width), np.int64)}
    if "token_type_ids" in names: feeds["token_type_ids"] = np.zeros((rows, width), np.int64)
    for _ in range(5): s.run(None, feeds)
    ts = []
    for _ in range(n):
        a = time.perf_counter(); s.run(None, feeds); ts.append(time.perf_counter() - a)
    return np.median(ts) * 1e3
print(names)
for rows, width in [(1,8),(1,16),(1,24),(1,32),(1,48),(1,64),(1,96),(1,128),(2,16),(2,32),(4,16),(4,32),(8,16),(8,32),(16,32),(2,64),(4,64)]:
    print(rows, width, f"{t(rows, width):.3f} ms")
