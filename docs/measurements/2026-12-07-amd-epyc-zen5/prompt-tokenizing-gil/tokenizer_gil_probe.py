import threading, time, sys
from tokenizers import Tokenizer
tok = Tokenizer.from_file("model_repository/smollm2_chat/1/tokenizer.json")
text = "7" * 165000
def run(call):
    stop = False; gaps = []
    def ticker():
        last = time.perf_counter()
        while not stop:
            time.sleep(0.001)
            now = time.perf_counter(); gaps.append(now - last); last = now
    t = threading.Thread(target=ticker); t.start(); time.sleep(0.05)
    t0 = time.perf_counter(); n = call(); dt = time.perf_counter() - t0
    time.sleep(0.02); stop = True; t.join()
    return n, dt, max(gaps)
for name, call in (("encode", lambda: len(tok.encode(text, add_special_tokens=False).ids)),
                   ("encode_batch", lambda: len(tok.encode_batch([text], add_special_tokens=False)[0].ids))):
    for _ in range(2):
        n, dt, worst = run(call)
        print(f"{name}: {n} tokens in {dt*1000:.0f} ms; the other thread's worst gap {worst*1000:.1f} ms")
