"""serving/runtime/native/request_guard.c's byte limits read from the environment: compiled here and
preloaded into a small program named tritonserver that adds one input, against a stand-in for
libtritonserver. A value that is not a byte count keeps the default (it turned the limit off, or
into a few bytes)."""
from __future__ import annotations

import os
import shutil
import subprocess
import textwrap

import pytest


CC = shutil.which("cc") or shutil.which("gcc")
pytestmark = pytest.mark.skipif(not CC, reason="no C compiler on PATH")

FAKE_TRITON = textwrap.dedent("""
    #include <stdint.h>
    #include <stdlib.h>
    #include <string.h>
    typedef struct TRITONSERVER_Error { int code; char *message; } TRITONSERVER_Error;
    TRITONSERVER_Error *TRITONSERVER_ErrorNew(int code, const char *message) {
        TRITONSERVER_Error *e = malloc(sizeof *e); e->code = code; e->message = strdup(message); return e; }
    TRITONSERVER_Error *TRITONSERVER_InferenceRequestAddInput(void *r, const char *n, int t, const int64_t *s, uint64_t d) { return NULL; }
""")
#: adds [1, 128] of INT64 (1 KiB, a text_encoder request) and [2**40, 1, 8, 8] of FP32 (the bad_alloc shape)
ADD_INPUTS = textwrap.dedent("""
    #include <stdint.h>
    #include <stdio.h>
    void *TRITONSERVER_InferenceRequestAddInput(void *r, const char *n, int t, const int64_t *s, uint64_t d);
    int main(void) {
        int64_t small[2] = { 1, 128 }, huge[4] = { 1LL << 40, 1, 8, 8 };
        printf("%s %s\\n", TRITONSERVER_InferenceRequestAddInput((void *)16, "input_ids", 9, small, 2) ? "refused" : "added",
               TRITONSERVER_InferenceRequestAddInput((void *)32, "image", 11, huge, 4) ? "refused" : "added");
        return 0;
    }
""")


@pytest.mark.parametrize("value, expected", [("", "added refused"), ("268435456", "added refused"), ("0", "added added"),
                                             ("1000", "refused refused"), ("256M", "added refused"),
                                             ("garbage", "added refused"), ("-1", "added refused")])
def test_the_input_limit_is_a_byte_count_or_the_default(guarded_tritonserver, value, expected):
    library, program = guarded_tritonserver(FAKE_TRITON, ADD_INPUTS)
    env = {**os.environ, "LD_PRELOAD": str(library), "SERVING_REQUEST_GUARD": "on",
           "SERVING_REQUEST_GUARD_MAX_INPUT_BYTES": value}
    done = subprocess.run([str(program)], capture_output=True, text=True, env=env, timeout=30)
    assert done.stdout.strip() == expected, (done.stdout, done.stderr)
    assert ("is not a byte count" in done.stderr) == (value in ("256M", "garbage", "-1")), done.stderr
