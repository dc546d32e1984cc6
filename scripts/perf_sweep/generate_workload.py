"""The generation benchmark's workload and summary statistics: pure and seeded.

Open-loop Poisson arrivals (exponential gaps at `rate` requests/s), user prompts drawn from a fixed
list behind one shared system prompt (the chat template), and long-tailed output lengths between
16 and 256 tokens (log-normal, median ~40, clipped): most answers are short, a few are long, as in
the field reports, and that spread is what static batching wastes. Every request sets
`ignore_eos` so its output length is the drawn one. `summarise` turns per-request token times
into the report's figures.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

#: A long, realistic system prompt (~200 tokens) shared by every chat request of the benchmark.
LONG_SYSTEM_PROMPT = (
    "You are a helpful, careful and concise assistant working for an online bookshop. Answer the customer's "
    "question in plain English. If the question is about an order, ask for the order number before giving any "
    "details, and never reveal another customer's information. If you do not know the answer, say so and offer "
    "to connect the customer with a human colleague. Keep answers short: two or three sentences unless the "
    "customer asks for more detail. Do not invent prices, delivery dates or stock levels; when asked, explain "
    "that they are shown on the product page and may change. Be polite, avoid jargon, and do not use lists unless "
    "the customer asks for steps. Our opening hours are nine to five on weekdays, returns are accepted within "
    "thirty days with a receipt, and shipping is free for orders over fifty pounds. Recommend books only from "
    "the categories the customer mentions, and always mention that recommendations are suggestions, not reviews."
)
USER_PROMPTS = (
    "Can you recommend a mystery novel?", "How long do I have to return a book?", "Is shipping free?",
    "What are your opening hours?", "Where is my order?", "Do you sell audiobooks?", "Can I change my address?",
    "Suggest a book for a ten year old.", "Do you have gift cards?", "How do I cancel an order?",
    "What is a good science fiction classic?", "Can I return a damaged book?",
)


@dataclass(frozen=True)
class WorkloadRequest:
    arrival_s: float
    user_prompt: str
    output_tokens: int


def long_tailed_lengths(count: int, seed: int, low: int = 16, high: int = 256, median: float = 40.0, sigma: float = 0.9) -> list[int]:
    rng = np.random.default_rng(seed)
    return [int(v) for v in np.clip(np.rint(rng.lognormal(np.log(median), sigma, count)), low, high)]


def poisson_workload(count: int, rate: float, seed: int, lengths: Sequence[int] | None = None) -> list[WorkloadRequest]:
    rng = np.random.default_rng(seed + 1)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, count))
    arrivals -= arrivals[0]
    lengths = list(lengths) if lengths is not None else long_tailed_lengths(count, seed)
    prompts = [USER_PROMPTS[i] for i in rng.integers(0, len(USER_PROMPTS), count)]
    return [WorkloadRequest(float(a), p, n) for a, p, n in zip(arrivals, prompts, lengths)]


@dataclass(frozen=True)
class Sla:
    """A request meets the SLA when its first token comes within `ttft_s` and its mean gap
    between tokens stays within `itl_s`."""

    ttft_s: float = 2.0
    itl_s: float = 0.25


@dataclass(frozen=True)
class RequestTiming:
    arrival_s: float
    token_times_s: tuple[float, ...]

    @property
    def ttft_s(self) -> float:
        return self.token_times_s[0] - self.arrival_s

    @property
    def gaps_s(self) -> list[float]:
        return list(np.diff(self.token_times_s))

    @property
    def e2e_s(self) -> float:
        return self.token_times_s[-1] - self.arrival_s


def _pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


def summarise(timings: Sequence[RequestTiming], decode_batches: Sequence[int], max_running: int, sla: Sla) -> dict:
    ttft = [t.ttft_s for t in timings]
    gaps = [g for t in timings for g in t.gaps_s]
    e2e = [t.e2e_s for t in timings]
    start = min(t.arrival_s for t in timings)
    end = max(t.token_times_s[-1] for t in timings)
    tokens = sum(len(t.token_times_s) for t in timings)
    good = [t for t in timings if t.ttft_s <= sla.ttft_s and (not t.gaps_s or float(np.mean(t.gaps_s)) <= sla.itl_s)]
    return {
        "requests": len(timings), "output_tokens": tokens, "duration_s": round(end - start, 2),
        "output_tokens_per_s": round(tokens / (end - start), 2),
        "ttft_p50_s": round(_pct(ttft, 50), 3), "ttft_p99_s": round(_pct(ttft, 99), 3),
        "itl_p50_s": round(_pct(gaps, 50), 4), "itl_p99_s": round(_pct(gaps, 99), 4),
        "e2e_p50_s": round(_pct(e2e, 50), 2), "e2e_p99_s": round(_pct(e2e, 99), 2),
        "goodput_requests_per_s": round(len(good) / (end - start), 3), "sla_met": len(good),
        "mean_decode_batch": round(float(np.mean(decode_batches)) if decode_batches else 0.0, 2),
        "mean_occupancy": round(float(np.mean(decode_batches)) / max_running if decode_batches else 0.0, 3),
    }
