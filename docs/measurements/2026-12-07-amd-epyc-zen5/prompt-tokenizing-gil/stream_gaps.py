"""A running stream's token gaps while other clients send over-long prompts (165,000 bytes of
digits: under the prompt-byte bound, so each is tokenized before it is refused for its tokens).

Starts one tritonserver with smollm2_chat alone on free loopback ports (the test suite's own
start_test_server), streams `ROUNDS` greedy generations of 200 tokens over HTTP generate_stream, and
prints each round's worst and median gap between two streamed chunks, first alone, then with two
threads sending the long prompts back to back. Run with the checkout's environment:
    PYTHONPATH=scripts:build:clients:tests .venv/bin/python docs/measurements/.../stream_gaps.py
"""
import json
import statistics
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from conftest import start_test_server

ROUNDS = 3
LONG_PROMPT = "7" * 165_000


def stream_gaps(url: str) -> list[float]:
    body = json.dumps({"text_input": "Write a long story about the sea.", "max_tokens": 200, "stream": True,
                       "ignore_eos": True}).encode()
    request = urllib.request.Request(f"http://{url}/v2/models/smollm2_chat/generate_stream", body,
                                     {"Content-Type": "application/json"})
    stamps = []
    with urllib.request.urlopen(request, timeout=120) as response:
        for line in response:
            if line.startswith(b"data:"):
                stamps.append(time.perf_counter())
    return [b - a for a, b in zip(stamps, stamps[1:])]


def long_prompts(url: str, stop: threading.Event, refused: list[str]) -> None:
    body = json.dumps({"text_input": LONG_PROMPT, "max_tokens": 1}).encode()
    while not stop.is_set():
        request = urllib.request.Request(f"http://{url}/v2/models/smollm2_chat/generate", body,
                                         {"Content-Type": "application/json"})
        try:
            urllib.request.urlopen(request, timeout=60).read()
            refused.append("answered")
        except urllib.error.HTTPError as exc:
            refused.append(exc.read().decode()[:120])


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = start_test_server(Path(tmp), ("smollm2_chat",))
        try:
            url = server.url("http")
            stream_gaps(url)  # warm-up
            for label, senders in (("alone", 0), ("beside 2 threads of 165,000-byte prompts", 2)):
                stop, refused = threading.Event(), []
                threads = [threading.Thread(target=long_prompts, args=(url, stop, refused)) for _ in range(senders)]
                for thread in threads:
                    thread.start()
                for round_ in range(ROUNDS):
                    gaps = stream_gaps(url)
                    print(f"{label}, round {round_ + 1}: {len(gaps) + 1} chunks, gap median "
                          f"{statistics.median(gaps) * 1000:.1f} ms, worst {max(gaps) * 1000:.1f} ms")
                stop.set()
                for thread in threads:
                    thread.join()
                if refused:
                    print(f"  {len(refused)} long prompts sent, e.g.: {refused[0]}")
        finally:
            server.process.stop()


if __name__ == "__main__":
    main()
