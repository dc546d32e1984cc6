/*
 * gzip_level: the zlib level of tritonserver's compressed HTTP responses.
 *
 * Why (docs/performance.md, "Compressed responses"): Triton's HTTP frontend compresses a response
 * whenever the request says `Accept-Encoding: gzip` (or deflate), at zlib's default level 6, on
 * the thread that completes the request, and it has no setting for it. Most HTTP clients send that
 * header by default (Python's requests, aiohttp and httpx all do), so every JSON answer pays it:
 * measured for one 384-float embedding, Triton's `compute_output` was 450-490 us with the header
 * against 150-180 us without, and a lone text request 5-9% slower. Level 1 (nginx's default) costs
 * about a third of level 6 for a 5% larger body; level 0 frames the body as gzip without compressing
 * it (a CRC and a copy), which is all a loopback or in-cluster link needs.
 *
 * What this does: preloaded into `tritonserver` (LD_PRELOAD, set by serving.runtime.server when
 * `[server] http_gzip_level` is set), it replaces the `level` argument of zlib's `deflateInit2_`
 * (gzip) and `deflateInit_` (deflate) with SERVING_HTTP_GZIP_LEVEL (0-9). With "off" both fail
 * (Z_STREAM_ERROR) instead: Triton 2.51's HTTP frontend then sends the body uncompressed, without a
 * Content-Encoding header (src/http_server.cc: "just log the compression error and return the
 * uncompressed data"; a response to a client that accepts gzip may always be identity). gRPC
 * message compression, if a client asks for it, falls back to uncompressed messages the same way.
 * Everything else is zlib's and Triton's own: which requests get a compressed answer, the headers,
 * the format. It is inert in
 * any process that is not `tritonserver` (the backend stubs inherit the environment, and Python's
 * own zlib users there keep their levels) and when the variable is unset or out of range.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tritonserver_only.h"

/* zlib's prototypes, with the stream as an opaque pointer (no zlib headers needed to build this) */
typedef int (*deflate_init2_fn)(void *, int, int, int, int, int, const char *, int);
typedef int (*deflate_init_fn)(void *, int, const char *, int);

static deflate_init2_fn real_init2;
static deflate_init_fn real_init;
static int forced_level = -1;   /* -1: leave the caller's level alone */
static int compression_off = 0; /* 1: every deflate set-up fails, so Triton answers uncompressed */

static void resolve(void) {
    if (!real_init2)
        real_init2 = (deflate_init2_fn)dlsym(RTLD_NEXT, "deflateInit2_");
    if (!real_init)
        real_init = (deflate_init_fn)dlsym(RTLD_NEXT, "deflateInit_");
}

__attribute__((constructor)) static void gzip_level_init(void) {
    resolve();
    if (!acting_in_this_process((const void *)gzip_level_init))
        return;
    const char *level = getenv("SERVING_HTTP_GZIP_LEVEL");
    if (level && strcmp(level, "off") == 0)
        compression_off = 1;
    else if (level && *level && strspn(level, "0123456789") == strlen(level) && atoi(level) <= 9)
        forced_level = atoi(level);
}

int deflateInit2_(void *strm, int level, int method, int window_bits, int mem_level, int strategy,
                  const char *version, int stream_size) {
    resolve();
    if (compression_off)
        return -2; /* Z_STREAM_ERROR: Triton logs it (verbose only) and sends the body as it is */
    if (!real_init2)
        return -6; /* Z_VERSION_ERROR: no zlib behind this wrapper (never seen: a caller links zlib) */
    return real_init2(strm, forced_level >= 0 ? forced_level : level, method, window_bits, mem_level, strategy,
                      version, stream_size);
}

int deflateInit_(void *strm, int level, const char *version, int stream_size) {
    resolve();
    if (compression_off)
        return -2;
    if (!real_init)
        return -6;
    return real_init(strm, forced_level >= 0 ? forced_level : level, version, stream_size);
}
