"""serving/runtime/native/request_guard.c on a compressed HTTP body cut off before its stream ends:
compiled here, preloaded into a small program named tritonserver that inflates as Triton 2.51's
HTTP frontend does (src/data_compressor.h: Z_NO_FLUSH, never asks whether the stream ended) against
a stand-in for libtritonserver. On a real server: tests/integration/test_isolation.py."""
from __future__ import annotations

import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest


CC = shutil.which("cc") or shutil.which("gcc")
pytestmark = pytest.mark.skipif(not CC or not Path("/usr/include/zlib.h").exists(), reason="no C compiler or zlib.h")

FAKE_TRITON = textwrap.dedent("""
    #include <stdint.h>
    #include <stdlib.h>
    #include <string.h>
    typedef struct TRITONSERVER_Error { int code; char *message; } TRITONSERVER_Error;
    TRITONSERVER_Error *TRITONSERVER_ErrorNew(int code, const char *message) {
        TRITONSERVER_Error *e = malloc(sizeof *e); e->code = code; e->message = strdup(message); return e; }
    const char *TRITONSERVER_ErrorMessage(TRITONSERVER_Error *e) { return e->message; }
    TRITONSERVER_Error *TRITONSERVER_InferenceRequestNew(void **r, void *s, const char *m, int64_t v) { *r = (void *)16; return NULL; }
""")

#: Triton 2.51's DecompressData, then HandleInfer's TRITONSERVER_InferenceRequestNew; argv[1]: body bytes to send
HTTP_FRONTEND = textwrap.dedent("""
    #include <stdint.h>
    #include <stdio.h>
    #include <stdlib.h>
    #include <string.h>
    #include <zlib.h>
    typedef struct TRITONSERVER_Error TRITONSERVER_Error;
    TRITONSERVER_Error *TRITONSERVER_ErrorNew(int code, const char *message);
    const char *TRITONSERVER_ErrorMessage(TRITONSERVER_Error *e);
    TRITONSERVER_Error *TRITONSERVER_InferenceRequestNew(void **r, void *s, const char *m, int64_t v);
    static const char *infer(const unsigned char *body, size_t size) {
        z_stream s; memset(&s, 0, sizeof s);
        static unsigned char out[1 << 16];
        TRITONSERVER_Error *err = NULL;
        if (size) {
            inflateInit2(&s, 15 | 32);
            s.next_in = (unsigned char *)body; s.avail_in = (unsigned)size;
            do { s.next_out = out; s.avail_out = sizeof out;
                 if (inflate(&s, Z_NO_FLUSH) == Z_STREAM_ERROR) { err = TRITONSERVER_ErrorNew(1, "during decompression"); break; }
            } while (s.avail_out == 0);
            inflateEnd(&s);
        }
        void *request;
        if (!err) err = TRITONSERVER_InferenceRequestNew(&request, NULL, "m", -1);
        return err ? TRITONSERVER_ErrorMessage(err) : "accepted";
    }
    int main(int argc, char **argv) {
        const char *text = "{\\"inputs\\": []}";
        unsigned char gz[256]; z_stream s; memset(&s, 0, sizeof s);
        deflateInit2(&s, 6, Z_DEFLATED, 15 | 16, 8, Z_DEFAULT_STRATEGY);
        s.next_in = (unsigned char *)text; s.avail_in = (unsigned)strlen(text); s.next_out = gz; s.avail_out = sizeof gz;
        deflate(&s, Z_FINISH); size_t n = s.total_out;
        printf("%s\\n", infer(gz, n));
        printf("%s\\n", infer(gz, 10));           /* the gzip header alone */
        printf("%s\\n", infer(NULL, 0));          /* the next request on this thread, not compressed */
        printf("%s\\n", infer(gz, n - 8));        /* the trailer cut off */
        return 0;
    }
""")


def test_a_body_cut_off_before_its_stream_ends_is_refused_and_the_next_request_is_not(guarded_tritonserver):
    library, program = guarded_tritonserver(FAKE_TRITON, HTTP_FRONTEND, "-lz")
    env = {**os.environ, "LD_PRELOAD": str(library), "SERVING_REQUEST_GUARD": "on"}
    done = subprocess.run([str(program)], capture_output=True, text=True, env=env, timeout=30)
    whole, header_only, next_request, no_trailer = done.stdout.splitlines()
    assert whole == "accepted" and next_request == "accepted", done.stdout
    assert "ends before its stream does" in header_only and "ends before its stream does" in no_trailer, done.stdout
