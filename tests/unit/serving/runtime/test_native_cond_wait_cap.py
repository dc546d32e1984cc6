"""serving/runtime/native/cond_wait_cap.c, compiled here and preloaded into a small program named
tritonserver: what a capped wait returns to a caller that reads the result (POSIX: ETIMEDOUT means
the caller's deadline passed). Its effect on Triton's batcher: docs/triton-batcher-stall.md."""
from __future__ import annotations

import os
import shutil
import subprocess
import textwrap

import pytest

from serving.runtime.native import COND_WAIT_CAP, build_helper

pytestmark = pytest.mark.skipif(not (shutil.which("cc") or shutil.which("gcc")), reason="no C compiler on PATH")

#: A caller that trusts ETIMEDOUT to mean "the deadline passed" (POSIX; boost and libevent do).
TIMED_WAITS = textwrap.dedent("""
    #define _GNU_SOURCE
    #include <errno.h>
    #include <pthread.h>
    #include <stdio.h>
    #include <time.h>
    static long long ms(clockid_t c) { struct timespec t; clock_gettime(c, &t); return t.tv_sec * 1000LL + t.tv_nsec / 1000000; }
    int main(void) {
        pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
        pthread_cond_t c = PTHREAD_COND_INITIALIZER;
        struct timespec deadline;
        pthread_mutex_lock(&m);
        clock_gettime(CLOCK_REALTIME, &deadline); deadline.tv_sec += 1;
        long long start = ms(CLOCK_MONOTONIC);
        int first = pthread_cond_timedwait(&c, &m, &deadline);
        long long first_ms = ms(CLOCK_MONOTONIC) - start;
        while (pthread_cond_timedwait(&c, &m, &deadline) != ETIMEDOUT) {}
        long long timedwait_ms = ms(CLOCK_MONOTONIC) - start;
        clock_gettime(CLOCK_MONOTONIC, &deadline); deadline.tv_sec += 1;
        start = ms(CLOCK_MONOTONIC);
        while (pthread_cond_clockwait(&c, &m, CLOCK_MONOTONIC, &deadline) != ETIMEDOUT) {}
        long long clockwait_ms = ms(CLOCK_MONOTONIC) - start;
        struct timespec bad = { 0, 2000000000L };
        int invalid = pthread_cond_timedwait(&c, &m, &bad);
        printf("%d %lld %lld %lld %d\\n", first, first_ms, timedwait_ms, clockwait_ms, invalid);
        return 0;
    }
""")


def test_a_capped_wait_returns_early_as_a_spurious_wake_up_never_as_a_timeout(tmp_path):
    library, what = build_helper(COND_WAIT_CAP, tmp_path / "libcond_wait_cap.so")
    assert library, what
    (tmp_path / "waits.c").write_text(TIMED_WAITS)
    program = tmp_path / "tritonserver"  # the helper acts only in a process of that name
    subprocess.run([shutil.which("cc") or "gcc", "-O2", "-o", str(program), str(tmp_path / "waits.c"), "-lpthread"], check=True)
    env = {**os.environ, "LD_PRELOAD": str(library), "SERVING_COND_WAIT_CAP_US": "10000"}
    done = subprocess.run([str(program)], capture_output=True, text=True, env=env, timeout=30)
    first, first_ms, timedwait_ms, clockwait_ms, invalid = map(int, done.stdout.split())
    assert first == 0 and first_ms < 500, "the capped wait came back early, and as a wake-up (0), not ETIMEDOUT"
    assert 950 <= timedwait_ms < 1500 and 950 <= clockwait_ms < 1500, "ETIMEDOUT only once the caller's deadline passed"
    assert invalid == 22, "an invalid deadline is still the caller's EINVAL"
