/*
 * request_guard: per-request checks that Triton 2.51 leaves to the backend, done before a request
 * can join a batch.
 *
 * Why: two malformed requests get past Triton 2.51's own checks and then fail every request of the
 * batch they land in, or the backend stub that runs it (docs/operations.md, "One request never
 * hurts another"):
 * - A BYTES element whose 4-byte length prefix declares more bytes than the request holds. The
 *   core's check (InferenceRequest::ValidateBytesInputs) counts the elements but does not notice
 *   that the last one runs past the end of the data; the Python backend's check
 *   (backend_common's ValidateStringBuffer, called while it copies the whole batch's inputs) does,
 *   and fails the whole batch: every good request batched with it got "incomplete string data for
 *   inference input 'TEXT', expecting string of length 4294967280 but only 4 bytes available".
 *   Seen with hand-made binary data and with perf_analyzer input files that hold raw bytes.
 * - A shape whose element count overflows 64 bits (gRPC [1, 2^61 + 3] of INT64 with 24 bytes of
 *   data: the core's byte-size check wraps around to 24 and passes). The backend stub then aborts
 *   building the array ("array is too big"), and the model answers "Stub process is not healthy"
 *   until the stub is restarted.
 *
 * - A shape that disagrees with the data sent, in a way Triton 2.51 misreads: it takes a batch
 *   dimension of 0 (or of 2^32 or more, truncated to 32 bits) as "no batch dimension" or as another
 *   batch size, then checks the bytes against that. gRPC / binary [0, 3] of INT64 with 24 bytes reached
 *   text_encoder's backend as a 1-D array, and its input check raised IndexError, failing every
 *   request of the batch with a Python traceback; [0, 1] of TEXT with one element was answered as [1, 1].
 * - An HTTP JSON input whose shape asks for more memory than the host has (e.g. [2^40, 1, 8, 8]):
 *   the HTTP frontend allocates the shape's bytes before it reads `data`, and std::bad_alloc aborted
 *   the whole server. Refused in TRITONSERVER_InferenceRequestAddInput, before that allocation, when
 *   the shape needs more than SERVING_REQUEST_GUARD_MAX_INPUT_BYTES (default 256 MiB; 0 = no limit;
 *   a launched server gets serving.toml's `[server] max_input_bytes`, 1 MiB as served).
 * - A BYTES input (text, a prompt) whose data passes SERVING_REQUEST_GUARD_MAX_STRING_BYTES (default 32 MiB;
 *   0 = no limit), which no declared shape bounds: refused before the backend copies it into its stub's
 *   shared memory (check_string_size).
 * - An HTTP body sent with `Content-Encoding: gzip`/`deflate` that is not valid compressed data, or
 *   that inflates past SERVING_REQUEST_GUARD_MAX_INFLATED_BYTES (default 256 MiB): Triton 2.51 ignores
 *   zlib's Z_DATA_ERROR and uses whatever was inflated (nothing: an empty raw request, which
 *   text_embedder answers 200 with the empty text's embedding), and inflates without any limit (a
 *   1.5 MB body took 1.6 GB). `inflate` is wrapped to report both as a stream error, which Triton
 *   turns into an error answer, rewritten here into a 400 naming the problem.
 *
 * - A request asking for the classification extension on a BYTES output (gRPC / HTTP output parameter
 *   "classification": k; on this deployment the generative model's `text_output` over a gRPC stream):
 *   Triton 2.51's frontends divide the output's byte size by TRITONSERVER_DataTypeByteSize(BYTES) = 0
 *   (TopkClassifications, src/classification.cc) and the whole server died of SIGFPE. The classification
 *   is the frontends' own (the core never sees the parameter); their only call into the server library
 *   between reading that output and dividing is TRITONSERVER_ServerModelBatchProperties, which is answered
 *   here with an INVALID_ARG error for a BYTES output, so that response is an error naming the output.
 *
 * - An HTTP request with tens of thousands of request parameters ("parameters": {"p0": 0, "p1": 1, ...}):
 *   Triton 2.51's HTTP frontend looks each member up again by name in the JSON object (linear), so a
 *   1 MB body of 60,000 parameters took one HTTP thread ~3 s and 100,000 took 15 s; a dozen such
 *   requests held every HTTP thread, /v2/health/live went unanswered and the supervisor killed the
 *   partition as hung, with every request in flight. More than SERVING_REQUEST_GUARD_MAX_PARAMETERS
 *   (default 128; 0 = no limit) parameters on one request are refused at the first one past it, which
 *   ends the frontend's loop.
 *
 * - A full LLM wait queue answered HTTP 400 by /generate and /generate_stream: Triton 2.51 reads the error's
 *   code for the status after deleting the error (use after free); deleting is deferred (TRITONSERVER_ErrorDelete
 *   below), so the status is the error's, 503 for UNAVAILABLE.
 * - `"stream": true` sent to /generate, which answers once: Triton 2.51 sends the HTTP status (200) with a
 *   decoupled model's first response, and only after the last one answers {"error": "generate expects model to
 *   produce exactly 1 response, ..."}, the whole generation computed for nothing. The body scan below follows
 *   the first "stream" member (top level or in "parameters") of a request to a path ending in /generate; its
 *   `true` gets a '#', and the parse error there is answered 400 naming the two endpoints.
 *
 * - An HTTP JSON body nested millions of levels deep ('[' repeated): Triton 2.51 parses the body with
 *   rapidjson's recursive parser, one stack frame per level, so ~4 M levels overflow even the 256 MiB thread
 *   stack the launcher gives the server, and the whole server died of SIGSEGV: a 4,023-byte gzip body or a
 *   4 MB plain one (found by a review on 2026-12-06; six in 10 minutes spend the restart budget). Nesting is
 *   followed outside JSON strings up to the end of the body's JSON value, as a compressed body is inflated
 *   and as a plain body is read from an HTTP connection (readv/read/recv on the sockets accepted on the HTTP
 *   port, with just enough of HTTP/1.1 to find each body and its JSON part); past
 *   SERVING_REQUEST_GUARD_MAX_JSON_DEPTH (default 1024; 0 = no limit) levels the compressed body is a stream
 *   error and the plain body's opening byte is replaced with '#', which ends the parse there; either is
 *   answered 400 naming the depth.
 *
 * - A compressed HTTP body that inflates to a JSON of millions of small values ("data": [0,0,0,...]): Triton
 *   2.51 parses the JSON into a DOM of about 17 times its size before any check, so a 253 KB gzip body
 *   (255 MB inflated) held 4.7 GB for 4 s, more than the main partition's pod memory limit (5120 MiB).
 *   The bytes that can start a JSON value (',' '[' '{' ':') are counted as the body is inflated, and more
 *   than SERVING_REQUEST_GUARD_MAX_INFLATED_JSON_MARKS (default 4 Mi; 0 = no limit) is a stream error
 *   like a corrupt body, 400. (An uncompressed body costs the same 17 times its size: its sender pays
 *   for every byte; a proxy's body-size limit bounds it.)
 *
 * What this does: preloaded into `tritonserver` with SERVING_REQUEST_GUARD=on (serving.runtime.native),
 * it wraps the server API calls the HTTP and gRPC frontends make to build a request
 * (TRITONSERVER_InferenceRequestAddInput, ...AppendInputData, ...Remove*, ...Delete) to remember
 * each input's data type, shape and CPU buffers, and checks them in TRITONSERVER_ServerInferAsync.
 * A request that fails is answered alone with INVALID_ARG naming the input, the problem and the
 * expected form (the frontends turn an error from ServerInferAsync into that request's HTTP 400 /
 * gRPC INVALID_ARGUMENT); it never reaches a batch. Everything else, including every check Triton
 * makes itself, is unchanged. Inputs in GPU memory are not read. Inert in any other process and
 * when the variable is unset.
 *
 * Also, in tritonserver whether or not the checks are on: the Python backend's IPC regions
 * (/dev/shm/triton_*: every request and response of its models passes through them) are created owner-only,
 * not boost::interprocess's 0644 (shm_open and fchmod below).
 *
 * Also, as the one helper every host server preloads: the admin key is kept off tritonserver's
 * command line, which /proc/<pid>/cmdline shows to every local user (Triton takes the key only as an
 * argument). The launcher (serving.runtime.security.keep_key_off_command_line) puts a random decoy
 * where the key goes and passes the key in SERVING_ARGV_SECRET (the environment: /proc/<pid>/environ
 * is the owner's only); the constructor puts the key into Triton's argv before main() parses it and
 * removes both variables, so the backend stubs do not inherit them. A Kubernetes pod does the same with
 * a fixed decoy and the key from its Secret (deploy/k8s_deploy/workload.py).
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <errno.h>
#include <inttypes.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "tritonserver_only.h"

/* The few parts of tritonserver.h this needs (Triton 2.51's values), so no Triton headers are needed. */
typedef struct TRITONSERVER_Error TRITONSERVER_Error;
typedef struct TRITONSERVER_Server TRITONSERVER_Server;
typedef struct TRITONSERVER_InferenceRequest TRITONSERVER_InferenceRequest;
typedef struct TRITONSERVER_InferenceTrace TRITONSERVER_InferenceTrace;
typedef struct TRITONSERVER_BufferAttributes TRITONSERVER_BufferAttributes;
enum { TYPE_BOOL = 1, TYPE_UINT8, TYPE_UINT16, TYPE_UINT32, TYPE_UINT64, TYPE_INT8, TYPE_INT16, TYPE_INT32,
       TYPE_INT64, TYPE_FP16, TYPE_FP32, TYPE_FP64, TYPE_BYTES, TYPE_BF16 };
enum { MEMORY_CPU = 0, MEMORY_CPU_PINNED = 1 };
enum { ERROR_INTERNAL = 1, ERROR_INVALID_ARG = 3 };

typedef TRITONSERVER_Error *(*add_input_fn)(TRITONSERVER_InferenceRequest *, const char *, int, const int64_t *, uint64_t);
typedef TRITONSERVER_Error *(*append_fn)(TRITONSERVER_InferenceRequest *, const char *, const void *, size_t, int, int64_t);
typedef TRITONSERVER_Error *(*append_attr_fn)(TRITONSERVER_InferenceRequest *, const char *, const void *,
                                              TRITONSERVER_BufferAttributes *);
typedef TRITONSERVER_Error *(*by_name_fn)(TRITONSERVER_InferenceRequest *, const char *);
typedef TRITONSERVER_Error *(*by_request_fn)(TRITONSERVER_InferenceRequest *);
typedef TRITONSERVER_Error *(*infer_fn)(TRITONSERVER_Server *, TRITONSERVER_InferenceRequest *, TRITONSERVER_InferenceTrace *);
typedef TRITONSERVER_Error *(*error_new_fn)(int, const char *);
typedef TRITONSERVER_Error *(*attr_type_fn)(TRITONSERVER_BufferAttributes *, int *);
typedef TRITONSERVER_Error *(*attr_size_fn)(TRITONSERVER_BufferAttributes *, size_t *);
typedef void (*error_delete_fn)(TRITONSERVER_Error *);
typedef const char *(*error_message_fn)(TRITONSERVER_Error *);
typedef int (*error_code_fn)(TRITONSERVER_Error *);
void TRITONSERVER_ErrorDelete(TRITONSERVER_Error *error);  /* deferred, below */
typedef struct TRITONSERVER_InferenceResponse TRITONSERVER_InferenceResponse;
typedef TRITONSERVER_Error *(*response_output_fn)(TRITONSERVER_InferenceResponse *, uint32_t, const char **, int *,
                                                  const int64_t **, uint64_t *, const void **, size_t *, int *,
                                                  int64_t *, void **);
typedef TRITONSERVER_Error *(*batch_properties_fn)(TRITONSERVER_Server *, const char *, int64_t, uint32_t *, void **);

static int enabled;
static uint64_t max_input_bytes = 256ull << 20;    /* SERVING_REQUEST_GUARD_MAX_INPUT_BYTES; 0 = no limit */
static uint64_t max_inflated_bytes = 256ull << 20; /* SERVING_REQUEST_GUARD_MAX_INFLATED_BYTES; 0 = no limit */
static uint64_t max_string_bytes = 32ull << 20;    /* SERVING_REQUEST_GUARD_MAX_STRING_BYTES; 0 = no limit */
static uint64_t max_parameters = 128;              /* SERVING_REQUEST_GUARD_MAX_PARAMETERS; 0 = no limit */
/* SERVING_REQUEST_GUARD_MAX_INFLATED_JSON_MARKS; 0 = no limit: ',' '[' '{' ':' bytes in one inflated HTTP body */
static uint64_t max_inflated_json_marks = 4ull << 20;
/* Why the last inflate() on this thread was turned into a stream error (NULL: it was not). */
static __thread const char *inflate_problem;
/* The HTTP request body being inflated on this thread (Triton's DataCompressor: inflateInit2 with
 * windowBits 15|32; gRPC uses 15 or 31), whether its stream reached its end or failed, and whether a
 * body that ended early (cut off) waits for the request it belongs to (the thread's next
 * TRITONSERVER_InferenceRequestNew, which Triton's HandleInfer calls right after decompressing). */
static __thread void *body_stream;
static __thread int body_ended, body_failed, body_cut_off;
/* The bytes of the body inflated so far that can start a JSON value (',' '[' '{' ':'): Triton 2.51 parses the
 * JSON into a DOM of ~16 bytes and more per value, so "0,0,0,..." takes ~17 times its size (a 253 KB gzip
 * body of 255 MB of it held 4.7 GB); this many marks bound the values, whatever the compression. */
static __thread uint64_t body_json_marks;
/* SERVING_REQUEST_GUARD_MAX_JSON_DEPTH; 0 = no limit: how deeply a request body's JSON may nest. rapidjson's
 * parser recurses once per level; valid KServe bodies nest a handful of levels (data arrays: one per dimension). */
static uint64_t max_json_depth = 1024;

/* Where a JSON text is, for the nesting count: outside strings, '[' '{' open a level and ']' '}' close one;
 * once the first value closes (depth back to 0), the rest is not JSON (binary tensor data) and is not read.
 * For a body sent to a /generate endpoint that answers once (`watch_stream`), also the first member named
 * "stream" at the top level or in the top-level "parameters" object (Triton's generate endpoints take both as
 * the model's input of that name), its name without escapes: `member` is 1 in a name's string, 2 after one,
 * 3 after "stream":, 4 after "stream": [, 5 after "parameters":; `stream_true` once its value is true or [true. */
struct json_depth {
    uint64_t depth, offset;
    unsigned char in_string, escaped, started, done, refused;
    unsigned char watch_stream, member, in_parameters, name_length, stream_true;
    char name[11];
};

static int member_named(const struct json_depth *j, const char *name) {
    return j->name_length == strlen(name) && memcmp(j->name, name, j->name_length) == 0;
}

/* Follows a watched /generate body's "stream" member by one byte `c` (before `j`'s string and depth state
 * take it in); returns 1 at the `t` of its `true`. */
static int stream_member_feed(struct json_depth *j, unsigned char c) {
    if (j->in_string) {  /* a member name's bytes, up to its closing quote */
        if (j->member != 1) return 0;
        if (c == '"' && !j->escaped) { j->member = 2; return 0; }
        if (c == '\\' || j->name_length >= sizeof j->name) j->name_length = sizeof j->name;  /* matches no name */
        else j->name[j->name_length++] = (char)c;
        return 0;
    }
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') return 0;
    unsigned char member = j->member;
    j->member = 0;
    if (member == 2 && c == ':') {  /* the string was a member's name */
        if (member_named(j, "stream")) j->member = 3;
        else if (j->depth == 1 && member_named(j, "parameters")) j->member = 5;
        return 0;
    }
    if (member == 3 && c == '[') { j->member = 4; return 0; }
    if (member == 3 || member == 4) {  /* the first "stream" decides, whatever its value */
        j->watch_stream = 0;
        return c == 't';
    }
    if (member == 5 && c == '{') j->in_parameters = 1;  /* its members are at depth 2 */
    else if (c == '}' && j->in_parameters && j->depth == 2) j->in_parameters = 0;
    if (c == '"' && (j->depth == 1 || (j->in_parameters && j->depth == 2))) { j->member = 1; j->name_length = 0; }
    return 0;
}

/* Feeds `n` bytes; returns the index of the byte that opens a level past the limit, or of the `true` of a
 * watched /generate body's "stream": true (`stream_true` set), or -1. */
static long json_depth_feed(struct json_depth *j, unsigned char *bytes, size_t n) {
    for (size_t i = 0; i < n && !j->done; i++, j->offset++) {
        unsigned char c = bytes[i];
        if (j->watch_stream && stream_member_feed(j, c)) {
            j->stream_true = 1; j->done = 1; return (long)i;
        }
        if (j->in_string) {
            if (j->escaped) j->escaped = 0;
            else if (c == '\\') j->escaped = 1;
            else if (c == '"') j->in_string = 0;
        } else if (c == '"') {
            j->in_string = 1;
        } else if (c == '[' || c == '{') {
            j->started = 1;
            if (max_json_depth && ++j->depth > max_json_depth) { j->refused = 1; j->done = 1; return (long)i; }
        } else if (c == ']' || c == '}') {
            if (j->depth) j->depth--;
            if (j->started && j->depth == 0) j->done = 1;
        }
    }
    return -1;
}
static __thread struct json_depth body_depth;
/* Why the thread's request body had a byte cut short (made '#', so Triton's parser stops there), and the
 * JSON offset of that byte, until the parse error it causes is answered and rewritten to say why. One
 * slot: a body is cut at most once (its scan stops at the cut).
 * - CUT_TOO_DEEP: nesting deeper than max_json_depth (each level takes parser stack).
 * - CUT_STREAM_TRUE: a /generate body's "stream": true (its 't'). Triton 2.51's /generate sends its HTTP
 *   status with the first of a decoupled model's responses and only then finds that there is more than
 *   one, so a streamed request there was answered 200 {"error": "generate expects model to produce
 *   exactly 1 response, ..."}. */
enum body_cut { CUT_NONE, CUT_TOO_DEEP, CUT_STREAM_TRUE };
static __thread enum body_cut cut_reason;
static __thread uint64_t cut_offset;

/* The next definition of `name`: the server library's. Found in the objects loaded after this one, or
 * else in any other loaded object (a process may have loaded the server library privately,
 * RTLD_LOCAL, where RTLD_NEXT cannot see it); a call with no definition anywhere cannot be
 * forwarded, so it aborts with a message instead of jumping to address 0. */
struct lookup { const char *name; const char *self; void *found; };

static int search_other_objects(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    struct lookup *lookup = data;
    if (!info->dlpi_name || !*info->dlpi_name || (lookup->self && strcmp(info->dlpi_name, lookup->self) == 0)) return 0;
    void *handle = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
    if (handle) { lookup->found = dlsym(handle, lookup->name); dlclose(handle); }
    return lookup->found != NULL;
}

static void *real(const char *name) {
    struct lookup lookup = { name, NULL, dlsym(RTLD_NEXT, name) };
    Dl_info self;
    if (!lookup.found && dladdr((void *)real, &self)) lookup.self = self.dli_fname;
    if (!lookup.found) dl_iterate_phdr(search_other_objects, &lookup);
    if (!lookup.found) {
        fprintf(stderr, "request_guard: %s is called but no library defines it\n", name);
        abort();
    }
    return lookup.found;
}

/* Each argument holding SERVING_ARGV_DECOY gets SERVING_ARGV_SECRET in its place, in a copy: the
 * memory /proc/<pid>/cmdline reads keeps the decoy. */
static void restore_argv_secret(int argc, char **argv) {
    const char *decoy = getenv("SERVING_ARGV_DECOY"), *secret = getenv("SERVING_ARGV_SECRET");
    if (!argv || !decoy || !*decoy || !secret) return;
    size_t decoy_len = strlen(decoy), secret_len = strlen(secret);
    for (int i = 1; i < argc && argv[i]; i++) {
        char *at = strstr(argv[i], decoy);
        if (!at) continue;
        size_t head = (size_t)(at - argv[i]), tail = strlen(at + decoy_len);
        char *copy = malloc(head + secret_len + tail + 1);
        if (!copy) continue; /* the decoy stays: the API is locked with a key nobody can send */
        memcpy(copy, argv[i], head);
        memcpy(copy + head, secret, secret_len);
        memcpy(copy + head + secret_len, at + decoy_len, tail + 1);
        argv[i] = copy;
    }
}

/* `variable`'s value overwritten with '*' where it stands (the environment block /proc/<pid>/environ shows). */
static void wipe_environment_value(const char *variable) {
    char *value = getenv(variable);
    if (value) memset(value, '*', strlen(value));
}

/* A limit (bytes, or a count) from the environment: decimal digits only (0 = no limit). Anything else ("256M", "-1",
 * a typo) keeps the default and says so, instead of turning the limit off or into a few bytes. */
static uint64_t env_limit(const char *variable, uint64_t fallback, const char *what) {
    const char *text = getenv(variable);
    if (!text || !*text) return fallback;
    char *end = NULL;
    errno = 0;
    unsigned long long value = strtoull(text, &end, 10);
    if (*text < '0' || *text > '9' || *end || errno == ERANGE) {
        fprintf(stderr, "request_guard: %s=%s is not a %s (decimal digits; 0 = no limit): using %" PRIu64 "\n",
                variable, text, what, fallback);
        return fallback;
    }
    return value;
}

static void http_port_from_argv(int argc, char **argv);
/* Set in tritonserver: its Python backend's IPC regions are made owner-only (shm_open / fchmod below). */
static int in_server_process;

__attribute__((constructor)) static void request_guard_init(int argc, char **argv, char **envp) {
    (void)envp;
    int in_server = acting_in_this_process((const void *)request_guard_init);
    in_server_process = in_server;
    if (in_server) {
        restore_argv_secret(argc, argv);
        /* only in the server: a pod's `sh -c ... exec tritonserver` preloads this too (LD_PRELOAD is the
         * container's), and the shell must pass the variables on. unsetenv only keeps the key from the
         * children; /proc/<pid>/environ reads the process's original environment block, where the value
         * still stood for anything running as the server's user (in a pod: every model's Python code), so
         * its bytes are overwritten there first. */
        wipe_environment_value("SERVING_ARGV_SECRET");
        unsetenv("SERVING_ARGV_DECOY");
        unsetenv("SERVING_ARGV_SECRET");
    }
    const char *on = getenv("SERVING_REQUEST_GUARD");
    enabled = on && strcmp(on, "on") == 0 && in_server;
    if (!enabled) return;
    max_input_bytes = env_limit("SERVING_REQUEST_GUARD_MAX_INPUT_BYTES", max_input_bytes, "byte count");
    max_inflated_bytes = env_limit("SERVING_REQUEST_GUARD_MAX_INFLATED_BYTES", max_inflated_bytes, "byte count");
    max_string_bytes = env_limit("SERVING_REQUEST_GUARD_MAX_STRING_BYTES", max_string_bytes, "byte count");
    max_parameters = env_limit("SERVING_REQUEST_GUARD_MAX_PARAMETERS", max_parameters, "count");
    max_inflated_json_marks = env_limit("SERVING_REQUEST_GUARD_MAX_INFLATED_JSON_MARKS", max_inflated_json_marks, "count");
    max_json_depth = env_limit("SERVING_REQUEST_GUARD_MAX_JSON_DEPTH", max_json_depth, "count");
    http_port_from_argv(argc, argv);
}

/* A new error from the server library itself (never through this library's TRITONSERVER_ErrorNew). */
static TRITONSERVER_Error *new_error(int code, const char *message) {
    static error_new_fn next;
    if (!next) next = (error_new_fn)real("TRITONSERVER_ErrorNew");
    return next(code, message);
}

/* --- What is remembered per request: its inputs, each with its type, shape and CPU buffers --- */

struct buffer { const char *base; size_t size; struct buffer *next; };
struct input {
    char *name;
    int datatype;
    int64_t *shape;
    uint64_t dims;
    int unreadable; /* data outside CPU memory: not checked */
    struct buffer *buffers, **tail;
    struct input *next;
};
struct request { TRITONSERVER_InferenceRequest *handle; struct input *inputs; uint64_t parameters; struct request *next; };

#define BUCKETS 1024
static struct request *table[BUCKETS];
static pthread_mutex_t locks[64] = { [0 ... 63] = PTHREAD_MUTEX_INITIALIZER };

static size_t bucket_of(TRITONSERVER_InferenceRequest *handle) { return ((uintptr_t)handle >> 4) % BUCKETS; }
static pthread_mutex_t *lock_of(size_t bucket) { return &locks[bucket % 64]; }

static void free_buffers(struct input *in) {
    for (struct buffer *b = in->buffers, *next; b; b = next) { next = b->next; free(b); }
    in->buffers = NULL; in->tail = &in->buffers; in->unreadable = 0;
}
static void free_input(struct input *in) { free_buffers(in); free(in->name); free(in->shape); free(in); }
static void free_request(struct request *r) {
    for (struct input *in = r->inputs, *next; in; in = next) { next = in->next; free_input(in); }
    free(r);
}

/* The entry of `handle` (created when `create`), with its bucket's lock HELD when non-NULL. */
static struct request *find_locked(TRITONSERVER_InferenceRequest *handle, int create) {
    size_t b = bucket_of(handle);
    pthread_mutex_lock(lock_of(b));
    for (struct request *r = table[b]; r; r = r->next)
        if (r->handle == handle) return r;
    if (create) {
        struct request *r = calloc(1, sizeof *r);
        if (r) { r->handle = handle; r->next = table[b]; table[b] = r; return r; }
    }
    pthread_mutex_unlock(lock_of(b));
    return NULL;
}
static void unlock(TRITONSERVER_InferenceRequest *handle) { pthread_mutex_unlock(lock_of(bucket_of(handle))); }

/* Take `handle`'s entry out of the table (the caller frees it), or NULL. */
static struct request *detach(TRITONSERVER_InferenceRequest *handle) {
    size_t b = bucket_of(handle);
    pthread_mutex_lock(lock_of(b));
    struct request *found = NULL;
    for (struct request **p = &table[b]; *p; p = &(*p)->next)
        if ((*p)->handle == handle) { found = *p; *p = found->next; break; }
    pthread_mutex_unlock(lock_of(b));
    return found;
}

static struct input *input_named(struct request *r, const char *name) {
    for (struct input *in = r->inputs; in; in = in->next)
        if (strcmp(in->name, name) == 0) return in;
    return NULL;
}

static const char *type_name(int datatype);
static uint64_t element_size(int datatype);
static int shape_text(const int64_t *shape, uint64_t dims, char *out, size_t room);
static const char *shape_bytes(int datatype, const int64_t *shape, uint64_t dims, uint64_t *bytes, uint64_t *elements);
/* shape_bytes' two verdicts (compared by address: a negative dimension is refused later, with the data) */
static const char NEGATIVE_DIMENSION[] = "a negative dimension; expected every dimension >= 0";
static const char TOO_MANY_ELEMENTS[] = "more elements than any request can hold; expected the shape of the data sent "
                                        "(its element count times the element size = the bytes sent)";

/* A shape whose bytes exceed max_input_bytes (or overflow): the message, and 1. */
static int shape_over_limit(const char *name, int datatype, const int64_t *shape, uint64_t dims, char *message,
                            size_t room) {
    uint64_t bytes = 0, elements = 0;
    const char *problem = shape_bytes(datatype, shape, dims, &bytes, &elements);
    if (problem == NEGATIVE_DIMENSION) return 0; /* refused in ServerInferAsync, as before */
    if (!problem && (max_input_bytes == 0 || bytes <= max_input_bytes)) return 0;
    char text[256];
    shape_text(shape, dims, text, sizeof text);
    if (problem)
        snprintf(message, room, "input '%s' has shape %s of %s: %s", name, text, type_name(datatype), problem);
    else
        snprintf(message, room, "input '%s' has shape %s of %s: %" PRIu64 " bytes, more than this server accepts "
                 "per input (%" PRIu64 ", SERVING_REQUEST_GUARD_MAX_INPUT_BYTES: serving.toml's [server] "
                 "max_input_bytes); expected the shape of the data sent, within the model's max_batch_size and dims",
                 name, text, type_name(datatype), bytes, max_input_bytes);
    return 1;
}

/* --- The wrapped calls: each forwards first and remembers only what Triton accepted --- */

TRITONSERVER_Error *TRITONSERVER_InferenceRequestAddInput(TRITONSERVER_InferenceRequest *handle, const char *name,
                                                          int datatype, const int64_t *shape, uint64_t dims) {
    static add_input_fn next;
    if (!next) next = (add_input_fn)real("TRITONSERVER_InferenceRequestAddInput");
    if (enabled && name && shape) {
        /* before Triton (and the HTTP frontend's JSON reader, which allocates the shape's bytes next) sees it */
        char message[768];
        if (shape_over_limit(name, datatype, shape, dims, message, sizeof message))
            return new_error(ERROR_INVALID_ARG, message);
    }
    TRITONSERVER_Error *err = next(handle, name, datatype, shape, dims);
    if (err || !enabled || !name) return err;
    struct input *in = calloc(1, sizeof *in);
    if (!in) return err;
    in->name = strdup(name);
    in->shape = malloc((dims ? dims : 1) * sizeof *shape);
    if (!in->name || !in->shape) { free(in->name); free(in->shape); free(in); return err; }
    if (dims) memcpy(in->shape, shape, dims * sizeof *shape);
    in->dims = dims; in->datatype = datatype; in->tail = &in->buffers;
    struct request *r = find_locked(handle, 1);
    if (!r) { free_input(in); return err; }
    in->next = r->inputs; r->inputs = in;
    unlock(handle);
    return err;
}

static void remember_buffer(TRITONSERVER_InferenceRequest *handle, const char *name, const void *base, size_t size,
                            int cpu) {
    struct request *r = find_locked(handle, 0);
    if (!r) return;
    struct input *in = input_named(r, name);
    if (in && !cpu) in->unreadable = 1;
    if (in && cpu) {
        struct buffer *b = calloc(1, sizeof *b);
        if (b) { b->base = base; b->size = size; *in->tail = b; in->tail = &b->next; }
        else in->unreadable = 1;
    }
    unlock(handle);
}

TRITONSERVER_Error *TRITONSERVER_InferenceRequestAppendInputData(TRITONSERVER_InferenceRequest *handle, const char *name,
                                                                 const void *base, size_t size, int memory_type,
                                                                 int64_t memory_type_id) {
    static append_fn next;
    if (!next) next = (append_fn)real("TRITONSERVER_InferenceRequestAppendInputData");
    TRITONSERVER_Error *err = next(handle, name, base, size, memory_type, memory_type_id);
    if (!err && enabled && name)
        remember_buffer(handle, name, base, size, memory_type == MEMORY_CPU || memory_type == MEMORY_CPU_PINNED);
    return err;
}

TRITONSERVER_Error *TRITONSERVER_InferenceRequestAppendInputDataWithBufferAttributes(
    TRITONSERVER_InferenceRequest *handle, const char *name, const void *base, TRITONSERVER_BufferAttributes *attributes) {
    static append_attr_fn next;
    static attr_type_fn type_of;
    static attr_size_fn size_of;
    static error_delete_fn error_delete;
    if (!next) next = (append_attr_fn)real("TRITONSERVER_InferenceRequestAppendInputDataWithBufferAttributes");
    TRITONSERVER_Error *err = next(handle, name, base, attributes);
    if (err || !enabled || !name) return err;
    if (!type_of) type_of = (attr_type_fn)real("TRITONSERVER_BufferAttributesMemoryType");
    if (!size_of) size_of = (attr_size_fn)real("TRITONSERVER_BufferAttributesByteSize");
    if (!error_delete) error_delete = (error_delete_fn)real("TRITONSERVER_ErrorDelete");
    int type = -1;
    size_t size = 0;
    TRITONSERVER_Error *e1 = type_of(attributes, &type), *e2 = size_of(attributes, &size);
    if (e1) error_delete(e1);
    if (e2) error_delete(e2);
    remember_buffer(handle, name, base, size, !e1 && !e2 && (type == MEMORY_CPU || type == MEMORY_CPU_PINNED));
    return err;
}

/* --- Request parameters: at most max_parameters per request --- */

/* NULL when `handle` may take one more parameter (counted), else the error that refuses it. */
static TRITONSERVER_Error *one_parameter_more(TRITONSERVER_InferenceRequest *handle) {
    if (!enabled || max_parameters == 0) return NULL;
    struct request *r = find_locked(handle, 1);
    if (!r) return NULL;
    uint64_t count = ++r->parameters;
    unlock(handle);
    if (count <= max_parameters) return NULL;
    char message[512];
    snprintf(message, sizeof message, "request parameters: more than %" PRIu64 " on one request; expected at most %" PRIu64
             " (SERVING_REQUEST_GUARD_MAX_PARAMETERS): the model's own settings, e.g. \"parameters\": {\"max_tokens\": "
             "16}, not a table of data (send data as an input tensor)", max_parameters, max_parameters);
    return new_error(ERROR_INVALID_ARG, message);
}

/* The four typed setters the frontends call for request parameters, each counted before it is passed on. */
#define COUNTED_PARAMETER_SETTER(kind, value_type)                                                               \
    TRITONSERVER_Error *TRITONSERVER_InferenceRequestSet##kind##Parameter(TRITONSERVER_InferenceRequest *handle, \
                                                                         const char *key, value_type value) {    \
        typedef TRITONSERVER_Error *(*setter_fn)(TRITONSERVER_InferenceRequest *, const char *, value_type);     \
        static setter_fn next;                                                                                  \
        if (!next) next = (setter_fn)real("TRITONSERVER_InferenceRequestSet" #kind "Parameter");                 \
        TRITONSERVER_Error *refused = one_parameter_more(handle);                                               \
        return refused ? refused : next(handle, key, value);                                                    \
    }
COUNTED_PARAMETER_SETTER(String, const char *)
COUNTED_PARAMETER_SETTER(Int, int64_t)
COUNTED_PARAMETER_SETTER(Bool, _Bool)
COUNTED_PARAMETER_SETTER(Double, double)

/* What Triton forgot of a request, forgotten here too: one input's data, one input, or every input. */
enum forget { FORGET_DATA, FORGET_INPUT, FORGET_ALL };

static void forget(TRITONSERVER_InferenceRequest *handle, const char *name, enum forget what) {
    struct request *r = find_locked(handle, 0);
    if (!r) return;
    for (struct input **p = &r->inputs; *p;) {
        struct input *in = *p;
        if (what != FORGET_ALL && (!name || strcmp(in->name, name) != 0)) { p = &in->next; continue; }
        if (what == FORGET_DATA) { free_buffers(in); break; }
        *p = in->next;
        free_input(in);
        if (what == FORGET_INPUT) break;
    }
    unlock(handle);
}

TRITONSERVER_Error *TRITONSERVER_InferenceRequestRemoveAllInputData(TRITONSERVER_InferenceRequest *handle,
                                                                    const char *name) {
    static by_name_fn next;
    if (!next) next = (by_name_fn)real("TRITONSERVER_InferenceRequestRemoveAllInputData");
    TRITONSERVER_Error *err = next(handle, name);
    if (!err && enabled) forget(handle, name, FORGET_DATA);
    return err;
}

TRITONSERVER_Error *TRITONSERVER_InferenceRequestRemoveInput(TRITONSERVER_InferenceRequest *handle, const char *name) {
    static by_name_fn next;
    if (!next) next = (by_name_fn)real("TRITONSERVER_InferenceRequestRemoveInput");
    TRITONSERVER_Error *err = next(handle, name);
    if (!err && enabled) forget(handle, name, FORGET_INPUT);
    return err;
}

TRITONSERVER_Error *TRITONSERVER_InferenceRequestRemoveAllInputs(TRITONSERVER_InferenceRequest *handle) {
    static by_request_fn next;
    if (!next) next = (by_request_fn)real("TRITONSERVER_InferenceRequestRemoveAllInputs");
    TRITONSERVER_Error *err = next(handle);
    if (!err && enabled) forget(handle, NULL, FORGET_ALL);
    return err;
}

TRITONSERVER_Error *TRITONSERVER_InferenceRequestDelete(TRITONSERVER_InferenceRequest *handle) {
    static by_request_fn next;
    if (!next) next = (by_request_fn)real("TRITONSERVER_InferenceRequestDelete");
    if (enabled) {
        struct request *r = detach(handle);
        if (r) free_request(r);
    }
    return next(handle);
}

/* --- The checks --- */

static const char *type_name(int datatype) {
    static const char *names[] = { "INVALID", "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16",
                                   "INT32", "INT64", "FP16", "FP32", "FP64", "BYTES", "BF16" };
    return datatype >= 0 && datatype <= TYPE_BF16 ? names[datatype] : "?";
}
static uint64_t element_size(int datatype) {
    switch (datatype) {
    case TYPE_BOOL: case TYPE_UINT8: case TYPE_INT8: return 1;
    case TYPE_UINT16: case TYPE_INT16: case TYPE_FP16: case TYPE_BF16: return 2;
    case TYPE_UINT32: case TYPE_INT32: case TYPE_FP32: return 4;
    case TYPE_UINT64: case TYPE_INT64: case TYPE_FP64: return 8;
    default: return 8; /* BYTES: the stub holds each element as a Python object (8-byte pointers) */
    }
}

static int shape_text(const int64_t *shape, uint64_t dims, char *out, size_t room) {
    int n = snprintf(out, room, "[");
    for (uint64_t i = 0; i < dims && n < (int)room; i++)
        n += snprintf(out + n, room - n, "%s%" PRId64, i ? "," : "", shape[i]);
    if (n < (int)room) n += snprintf(out + n, room - n, "]");
    return n;
}

/* No dimension may be negative, and the product of the non-zero ones times the element size must fit
 * in 63 bits (numpy's rule for the array the backend stub builds; a zero dimension must not hide an
 * overflow of the others, as Triton drops a batch dimension of 0 and then expects 0 bytes). */
static const char *shape_bytes(int datatype, const int64_t *shape, uint64_t dims, uint64_t *bytes_out,
                               uint64_t *elements_out) {
    uint64_t bytes = element_size(datatype), elements = 1;
    int empty = 0;
    for (uint64_t i = 0; i < dims; i++) {
        if (shape[i] < 0)
            return NEGATIVE_DIMENSION;
        if (shape[i] == 0) { empty = 1; continue; } /* a zero must not hide an overflow of the others */
        if (__builtin_mul_overflow(bytes, (uint64_t)shape[i], &bytes) || bytes > (uint64_t)INT64_MAX)
            return TOO_MANY_ELEMENTS;
        elements *= (uint64_t)shape[i]; /* cannot overflow: bytes did not */
    }
    *elements_out = empty ? 0 : elements;
    *bytes_out = empty ? 0 : bytes;
    return NULL;
}

static int check_shape(const struct input *in, char *message, size_t room) {
    uint64_t bytes = 0, elements = 0;
    const char *problem = shape_bytes(in->datatype, in->shape, in->dims, &bytes, &elements);
    if (!problem) return 0;
    char shape[256];
    shape_text(in->shape, in->dims, shape, sizeof shape);
    snprintf(message, room, "input '%s' has shape %s of %s: %s", in->name, shape, type_name(in->datatype), problem);
    return 1;
}

/* A read position in an input's buffers, taken as one run of bytes. */
struct cursor { const struct buffer *buffer; size_t offset; };

/* Move `count` bytes on (the caller knows they are there), copying them into `copy` when given. */
static void advance(struct cursor *at, uint64_t count, unsigned char *copy) {
    while (count > 0) {
        while (at->offset == at->buffer->size) { at->buffer = at->buffer->next; at->offset = 0; }
        size_t step = at->buffer->size - at->offset < count ? at->buffer->size - at->offset : (size_t)count;
        if (copy) { memcpy(copy, at->buffer->base + at->offset, step); copy += step; }
        at->offset += step; count -= step;
    }
}

/* Whether Triton 2.51 reads this shape as another one: a dimension of 0 (a batch dimension of 0 is
 * dropped, so [0, 3] is checked as [3]) or of 2^32 or more (truncated to 32 bits). Only then is the data
 * compared with the shape here; every other mismatch Triton refuses itself, with its own message. */
static int misread_shape(const struct input *in) {
    for (uint64_t i = 0; i < in->dims; i++)
        if (in->shape[i] == 0 || (uint64_t)in->shape[i] >= (1ull << 32)) return 1;
    return 0;
}

/* The data sent is what the shape says: for fixed-size types its element count times the element size. */
/* The bytes of data an input was given, over all its buffers. */
static uint64_t data_bytes(const struct input *in) {
    uint64_t total = 0;
    for (const struct buffer *b = in->buffers; b; b = b->next) total += b->size;
    return total;
}

/* A BYTES input whose data passes max_string_bytes. Its declared shape says nothing of its size (one
 * element may hold any number of bytes), so the shape limit never applied: a 50 MB prompt of shape [1]
 * was copied whole into its Python-backend stub's shared-memory region before the model refused it,
 * and the region keeps the largest size it held (a 120 MB one over gRPC: 164 MiB of /dev/shm, whose
 * pod volume holds 256 MiB; the running streams paused 0.3 s; a review, 2026-12-07). Refused here,
 * before the copy. 32 MiB holds a full text batch of 32 rows of 262,144 characters of 4 bytes. */
static int check_string_size(const struct input *in, char *message, size_t room) {
    if (in->datatype != TYPE_BYTES || in->unreadable || max_string_bytes == 0) return 0;
    uint64_t total = data_bytes(in);
    if (total <= max_string_bytes) return 0;
    snprintf(message, room, "input '%s' (BYTES) carries %" PRIu64 " bytes, more than this server accepts per text "
             "input (%" PRIu64 ", SERVING_REQUEST_GUARD_MAX_STRING_BYTES); expected shorter texts or fewer per request",
             in->name, total, max_string_bytes);
    return 1;
}

static int check_data_size(const struct input *in, char *message, size_t room) {
    if (in->datatype < TYPE_BOOL || in->datatype > TYPE_BF16 || in->datatype == TYPE_BYTES || in->unreadable ||
        !misread_shape(in))
        return 0;
    uint64_t bytes = 0, elements = 0;
    if (shape_bytes(in->datatype, in->shape, in->dims, &bytes, &elements)) return 0; /* check_shape's */
    uint64_t total = data_bytes(in);
    if (total == bytes || (total == 0 && in->buffers == NULL)) return 0; /* no data at all: Triton names it */
    char shape[256];
    shape_text(in->shape, in->dims, shape, sizeof shape);
    snprintf(message, room, "input '%s' has shape %s of %s (%" PRIu64 " elements, %" PRIu64 " bytes) but %" PRIu64
             " bytes were sent; expected the shape of the data sent, with at least one row in the batch dimension",
             in->name, shape, type_name(in->datatype), elements, bytes, total);
    return 1;
}

/* A batch of no rows: a first dimension of 0 with no data. Triton 2.51 drops a batch dimension of 0, finds
 * the 0 bytes sent right for what is left, and then never calls the backend for a batch of 0 items nor answers
 * the request: alone in its batch, a [0, 0] text_encoder request waited for the client's deadline, counted as a
 * success, and each left ~26 KB of the server's memory behind (3,000 of them: +76 MB; a review, 2026-12-07). */
static int check_rows(const struct input *in, char *message, size_t room) {
    if (in->dims == 0 || in->shape[0] != 0 || in->unreadable) return 0;
    if (data_bytes(in)) return 0; /* data for another shape: check_data_size and check_bytes name it */
    char shape[256];
    shape_text(in->shape, in->dims, shape, sizeof shape);
    snprintf(message, room, "input '%s' has shape %s of %s: no rows in its first (batch) dimension; expected at "
             "least one row", in->name, shape, type_name(in->datatype));
    return 1;
}

/* Every BYTES element is a 4-byte little-endian length and that many bytes; none may run past the end,
 * and there are as many elements as the shape says (checked when the data parses to its end). */
static int check_bytes(const struct input *in, char *message, size_t room) {
    if (in->datatype != TYPE_BYTES || in->unreadable) return 0;
    uint64_t total = data_bytes(in);
    struct cursor at = { in->buffers, 0 };
    uint64_t position = 0, element = 0;
    while (position < total) {
        if (total - position < 4) return 0; /* Triton's own check names a cut-off length */
        unsigned char length_bytes[4];
        advance(&at, 4, length_bytes);
        position += 4;
        uint64_t length = (uint64_t)length_bytes[0] | (uint64_t)length_bytes[1] << 8 | (uint64_t)length_bytes[2] << 16 |
                          (uint64_t)length_bytes[3] << 24;
        if (length > total - position) {
            snprintf(message, room, "input '%s' (BYTES): element %" PRIu64 " declares %" PRIu64 " bytes but only %" PRIu64
                     " follow in the request; expected each element as a 4-byte little-endian length followed by "
                     "exactly that many bytes", in->name, element, length, total - position);
            return 1;
        }
        advance(&at, length, NULL);
        position += length;
        element++;
    }
    uint64_t bytes = 0, elements = 0;
    if (in->buffers && misread_shape(in) && !shape_bytes(in->datatype, in->shape, in->dims, &bytes, &elements) &&
        element != elements) {
        char shape[256];
        shape_text(in->shape, in->dims, shape, sizeof shape);
        snprintf(message, room, "input '%s' has shape %s of BYTES (%" PRIu64 " elements) but %" PRIu64 " elements were "
                 "sent; expected the shape of the data sent, with at least one row in the batch dimension",
                 in->name, shape, elements, element);
        return 1;
    }
    return 0;
}

/* Triton's error for the binary data extension's raw request ("input byte size mismatch for input
 * 'raw_input'"): what it makes of an HTTP body whose Inference-Header-Content-Length is 0 or not a number,
 * when the client meant a JSON part. The core makes it without TRITONSERVER_ErrorNew, so it is replaced
 * here, where the frontend gets it. */
static TRITONSERVER_Error *with_raw_input_note(TRITONSERVER_Error *err) {
    static error_message_fn message_of;
    static error_code_fn code_of;
    if (!message_of) message_of = (error_message_fn)real("TRITONSERVER_ErrorMessage");
    if (!code_of) code_of = (error_code_fn)real("TRITONSERVER_ErrorCode");
    const char *message = message_of(err);
    if (!message || !strstr(message, "for input 'raw_input'")) return err;
    char text[1024];
    snprintf(text, sizeof text, "%.500s ('raw_input' is the whole body taken as one binary tensor, as the binary data "
             "extension does when Inference-Header-Content-Length is 0 or not a number; expected that header to be "
             "the byte length of the body's JSON part)", message);
    TRITONSERVER_Error *noted = new_error(code_of(err), text);
    TRITONSERVER_ErrorDelete(err);
    return noted;
}

TRITONSERVER_Error *TRITONSERVER_ServerInferAsync(TRITONSERVER_Server *server, TRITONSERVER_InferenceRequest *handle,
                                                  TRITONSERVER_InferenceTrace *trace) {
    static infer_fn next;
    if (!next) next = (infer_fn)real("TRITONSERVER_ServerInferAsync");
    struct request *r = enabled ? detach(handle) : NULL;
    if (r) {
        char message[768];
        int refused = 0;
        for (struct input *in = r->inputs; in && !refused; in = in->next)
            refused = check_shape(in, message, sizeof message) || check_string_size(in, message, sizeof message) ||
                      check_data_size(in, message, sizeof message) ||
                      check_bytes(in, message, sizeof message) || check_rows(in, message, sizeof message);
        free_request(r);
        if (refused) return new_error(ERROR_INVALID_ARG, message);
    }
    TRITONSERVER_Error *err = next(server, handle, trace);
    return enabled && err ? with_raw_input_note(err) : err;
}

/* --- The classification extension on a BYTES output: an error for that response, not a SIGFPE --- */

/* The output this thread read last (TRITONSERVER_InferenceResponseOutput), when it was BYTES: its name
 * (Triton's, valid while the response lives), else NULL. The frontends classify an output right after
 * reading it, on the same thread. */
static __thread const char *last_bytes_output;

TRITONSERVER_Error *TRITONSERVER_InferenceResponseOutput(TRITONSERVER_InferenceResponse *response, uint32_t index,
                                                         const char **name, int *datatype, const int64_t **shape,
                                                         uint64_t *dim_count, const void **base, size_t *byte_size,
                                                         int *memory_type, int64_t *memory_type_id, void **userp) {
    static response_output_fn next;
    if (!next) next = (response_output_fn)real("TRITONSERVER_InferenceResponseOutput");
    TRITONSERVER_Error *err = next(response, index, name, datatype, shape, dim_count, base, byte_size, memory_type,
                                   memory_type_id, userp);
    if (enabled)
        last_bytes_output = (!err && datatype && *datatype == TYPE_BYTES && name) ? (*name ? *name : "") : NULL;
    return err;
}

/* Called by Triton 2.51's HTTP and gRPC frontends only to classify an output (to find its batch
 * dimension), right before TopkClassifications divides by the output's element size. */
TRITONSERVER_Error *TRITONSERVER_ServerModelBatchProperties(TRITONSERVER_Server *server, const char *model_name,
                                                            int64_t model_version, uint32_t *flags, void **voidp) {
    static batch_properties_fn next;
    if (!next) next = (batch_properties_fn)real("TRITONSERVER_ServerModelBatchProperties");
    const char *output = enabled ? last_bytes_output : NULL;
    last_bytes_output = NULL;
    if (output) {
        char message[768];
        snprintf(message, sizeof message, "output '%.200s' of model '%.100s' is BYTES: the classification extension ranks "
                 "numeric outputs only; expected the 'classification' parameter only on outputs of a numeric type "
                 "(INT8 ... UINT64, FP32, FP64), or this output without it", output, model_name ? model_name : "?");
        return new_error(ERROR_INVALID_ARG, message);
    }
    return next(server, model_name, model_version, flags, voidp);
}

/* --- Compressed HTTP bodies: a corrupt or oversized stream is an error, not an (empty) request --- */

/* The first fields of zlib's z_stream (its ABI), so no zlib header is needed to build this. */
struct z_stream_head { const unsigned char *next_in; unsigned avail_in; unsigned long total_in;
                       unsigned char *next_out; unsigned avail_out; unsigned long total_out; };
enum { Z_NEED_DICT_ = 2, Z_STREAM_ERROR_ = -2, Z_DATA_ERROR_ = -3, Z_MEM_ERROR_ = -4 };
typedef int (*inflate_fn)(void *, int);
typedef int (*inflate_init2_fn)(void *, int, const char *, int);
typedef int (*inflate_end_fn)(void *);
enum { Z_STREAM_END_ = 1, HTTP_BODY_WINDOW_BITS = 15 | 32 };

int inflateInit2_(void *stream, int window_bits, const char *version, int stream_size) {
    static inflate_init2_fn next;
    if (!next) next = (inflate_init2_fn)real("inflateInit2_");
    int ret = next(stream, window_bits, version, stream_size);
    if (enabled && ret == 0 && window_bits == HTTP_BODY_WINDOW_BITS) {
        body_stream = stream; body_ended = body_failed = body_cut_off = 0; body_json_marks = 0;
        memset(&body_depth, 0, sizeof body_depth);
    }
    return ret;
}

static uint64_t json_marks(const unsigned char *from, const unsigned char *to) {
    uint64_t marks = 0;
    for (; from < to; from++)
        marks += *from == ',' || *from == '[' || *from == '{' || *from == ':';
    return marks;
}

int inflate(void *stream, int flush) {
    static inflate_fn next;
    if (!next) next = (inflate_fn)real("inflate");
    inflate_problem = NULL;
    const unsigned char *out_before = stream ? ((struct z_stream_head *)stream)->next_out : NULL;
    int ret = next(stream, flush);
    if (!enabled) return ret;
    if (stream && stream == body_stream && out_before && max_inflated_json_marks)
        body_json_marks += json_marks(out_before, ((struct z_stream_head *)stream)->next_out);
    if (stream && stream == body_stream && out_before && max_json_depth)
        json_depth_feed(&body_depth, (unsigned char *)out_before,
                        (size_t)(((struct z_stream_head *)stream)->next_out - out_before));
    if (ret == Z_DATA_ERROR_ || ret == Z_NEED_DICT_ || ret == Z_MEM_ERROR_) {
        inflate_problem = "the body is not valid gzip/deflate data (Content-Encoding says it is compressed); expected "
                          "the body compressed as its Content-Encoding header says, or no Content-Encoding header";
        ret = Z_STREAM_ERROR_; /* the one inflate result Triton 2.51 treats as an error */
    } else if (max_inflated_bytes && ((struct z_stream_head *)stream)->total_out > max_inflated_bytes) {
        inflate_problem = "the body inflates to more bytes than this server accepts "
                          "(SERVING_REQUEST_GUARD_MAX_INFLATED_BYTES); expected a smaller request";
        ret = Z_STREAM_ERROR_;
    } else if (stream == body_stream && body_depth.refused) {
        inflate_problem = "the body's JSON nests deeper than this server parses (SERVING_REQUEST_GUARD_MAX_JSON_DEPTH "
                          "levels of '[' or '{'): each level takes parser stack; expected a KServe v2 JSON body, whose "
                          "data arrays nest one level per dimension";
        ret = Z_STREAM_ERROR_;
    } else if (stream == body_stream && max_inflated_json_marks && body_json_marks > max_inflated_json_marks) {
        inflate_problem = "the body inflates to more JSON values (',' '[' '{' ':') than this server parses from a "
                          "compressed body (SERVING_REQUEST_GUARD_MAX_INFLATED_JSON_MARKS): each takes memory many times "
                          "its size; expected tensor data as binary data or with fewer values";
        ret = Z_STREAM_ERROR_;
    }
    if (stream == body_stream) {
        if (ret == Z_STREAM_END_) body_ended = 1;
        if (ret == Z_STREAM_ERROR_) body_failed = 1;
    }
    return ret;
}

/* Triton 2.51 inflates with Z_NO_FLUSH until the body's bytes run out and never asks whether the stream
 * ended: a body cut off anywhere (a 10-byte gzip header alone) was served as the bytes inflated so far
 * (text_embedder answered the empty text's embedding, 200). Its end is noted here, and the request is
 * refused when Triton creates it. */
int inflateEnd(void *stream) {
    static inflate_end_fn next;
    if (!next) next = (inflate_end_fn)real("inflateEnd");
    if (stream && stream == body_stream) {
        body_cut_off = enabled && !body_ended && !body_failed;
        body_stream = NULL;
    }
    return next(stream);
}

typedef TRITONSERVER_Error *(*request_new_fn)(TRITONSERVER_InferenceRequest **, TRITONSERVER_Server *, const char *,
                                              int64_t);

TRITONSERVER_Error *TRITONSERVER_InferenceRequestNew(TRITONSERVER_InferenceRequest **request,
                                                     TRITONSERVER_Server *server, const char *model, int64_t version) {
    static request_new_fn next;
    if (!next) next = (request_new_fn)real("TRITONSERVER_InferenceRequestNew");
    if (body_cut_off) {
        body_cut_off = 0;
        return new_error(ERROR_INVALID_ARG, "request body: the gzip/deflate data ends before its stream does (cut "
                         "off); expected the whole body compressed as its Content-Encoding header says");
    }
    return next(request, server, model, version);
}

/* --- Errors read after they are deleted: the generate endpoints' HTTP status --- */

/* Triton 2.51's HTTP generate endpoints (/generate, /generate_stream) delete a response's error
 * (GenerateRequestClass::AddErrorJson) and then read its code for the HTTP status (HttpCodeFromError
 * in InferResponseComplete), from freed memory: a full LLM wait queue (UNAVAILABLE, 503 on /infer) was
 * answered 400 on both, 18 times in 18 (found by a review on 2026-12-06), so clients that retry on 503
 * gave up. The last DEFERRED_ERRORS errors a thread deletes are freed when it deletes more, so that read
 * finds the error whole; a thread holds at most that many errors (a few hundred bytes) meanwhile. */
#define DEFERRED_ERRORS 4
static __thread TRITONSERVER_Error *deferred_errors[DEFERRED_ERRORS];
static __thread unsigned deferred_next;

void TRITONSERVER_ErrorDelete(TRITONSERVER_Error *error) {
    static error_delete_fn next;
    if (!next) next = (error_delete_fn)real("TRITONSERVER_ErrorDelete");
    if (!enabled || !error) {
        next(error);
        return;
    }
    TRITONSERVER_Error *oldest = deferred_errors[deferred_next];
    deferred_errors[deferred_next] = error;
    deferred_next = (deferred_next + 1) % DEFERRED_ERRORS;
    if (oldest) next(oldest);
}

/* Whether `message` is the HTTP frontend's verdict on a request body that is not the JSON it expects:
 * Triton 2.51 makes these INTERNAL (500), though the caller's body is at fault ("Unable to parse 'shape':
 * attempt to access JSON non-array as array", "Unable to parse 'data': Shape does not match true shape of
 * 'data' field", "failed to parse the request JSON buffer: ...", and "failed to get request params.: attempt to
 * get members for non-object" for `"parameters": "x"` or a /generate body of `[1, 2]`; src/http_server.cc). */
static int is_request_json_error(int code, const char *message) {
    return code == ERROR_INTERNAL && message &&
           (strncmp(message, "Unable to parse ", 16) == 0 || strstr(message, "attempt to access JSON ") ||
            strncmp(message, "failed to parse the request JSON buffer", 39) == 0 ||
            /* request "parameters" (or a /generate body) that is not a JSON object */
            strstr(message, "attempt to get members for non-object"));
}

/* Whether Triton's error is its JSON parser's verdict on a body at byte `offset` (a byte replaced above). */
static int is_parse_error_at(int code, const char *message, uint64_t offset) {
    if (code != ERROR_INTERNAL || !message || strncmp(message, "failed to parse the request JSON buffer", 39) != 0)
        return 0;
    char at[48];
    snprintf(at, sizeof at, " at %" PRIu64, offset);
    const char *found = strstr(message, at);
    return found && !isdigit((unsigned char)found[strlen(at)]);
}

/* Triton answers the stream error above with 500 "encountered inconsistent stream state during
 * decompression", and a body that is not the JSON it expects with 500 too: the caller's body is at
 * fault, so each becomes 400 naming the problem (and, for JSON, the expected form). */
TRITONSERVER_Error *TRITONSERVER_ErrorNew(int code, const char *message) {
    /* an error while a body is inflated, or before its request is created, ends that request: nothing
     * of its body may carry over to the thread's next request */
    if (body_stream) body_failed = 1;
    body_cut_off = 0;
    const char *problem = inflate_problem;
    if (enabled && problem && message && strstr(message, "during decompression")) {
        inflate_problem = NULL;
        char text[512];
        snprintf(text, sizeof text, "request body: %s", problem);
        return new_error(ERROR_INVALID_ARG, text);
    }
    if (enabled && cut_reason != CUT_NONE && is_parse_error_at(code, message, cut_offset)) {
        enum body_cut why = cut_reason;
        cut_reason = CUT_NONE;
        if (why == CUT_STREAM_TRUE)
            return new_error(ERROR_INVALID_ARG,
                             "request body: \"stream\": true asks for the text piece by piece, and .../generate answers "
                             "with exactly one response; expected \"stream\": false (or no \"stream\") at .../generate, "
                             "or the same body at .../generate_stream (Server-Sent Events, one event per piece)");
        char text[512];
        snprintf(text, sizeof text, "request body: its JSON nests deeper than %" PRIu64 " levels of '[' or '{' (byte %"
                 PRIu64 "; SERVING_REQUEST_GUARD_MAX_JSON_DEPTH): each level takes parser stack; expected a KServe "
                 "v2 JSON body, whose data arrays nest one level per dimension", max_json_depth, cut_offset);
        return new_error(ERROR_INVALID_ARG, text);
    }
    if (enabled && code == ERROR_INVALID_ARG && message && strncmp(message, "Input must set only one of", 26) == 0 &&
        strstr(message, "But no field is set")) {
        /* Triton's words for an input entry that is not an object too ({"inputs": [5]}): say the form */
        char text[1024];
        snprintf(text, sizeof text, "%.400s; expected each entry of \"inputs\" to be an object {\"name\": \"...\", "
                 "\"shape\": [1, ...], \"datatype\": \"FP32\" (or INT64, BYTES, ...), \"data\": [...]}, or with "
                 "\"parameters\": {\"binary_data_size\": N} and N bytes after the JSON part (binary data extension) "
                 "instead of \"data\"", message);
        return new_error(ERROR_INVALID_ARG, text);
    }
    if (enabled && is_request_json_error(code, message)) {
        char text[1024];
        snprintf(text, sizeof text, "%.600s; expected a JSON body of the KServe v2 inference protocol: {\"inputs\": "
                 "[{\"name\": \"...\", \"shape\": [1, ...], \"datatype\": \"FP32\" (or INT64, BYTES, ...), \"data\": "
                 "[...]}], optional \"outputs\": [{\"name\": \"...\"}] and \"parameters\": {...}} (at .../infer; "
                 "at .../generate: the model's inputs and parameters by name, e.g. {\"text_input\": \"...\", "
                 "\"max_tokens\": 16})", message);
        return new_error(ERROR_INVALID_ARG, text);
    }
    return new_error(code, message);
}

/* ------------------------------------------------------------------ plain HTTP bodies: JSON nesting depth
 * Triton's HTTP frontend (libevent/evhtp, linked into the binary) reads each connection with readv (read and
 * recv are wrapped alike) on the thread that then parses the request. The sockets accepted on the HTTP port
 * (--http-port, 8000 by default) are followed with just enough of HTTP/1.1 to find each request's body
 * (Content-Length or chunked) and its JSON part (Inference-Header-Content-Length bytes, else the whole body;
 * a compressed body is left to the inflate wrapper above). A byte that opens a level past
 * SERVING_REQUEST_GUARD_MAX_JSON_DEPTH is replaced with '#': rapidjson stops there ("Invalid value") instead
 * of recursing on, and the parse error is answered 400 naming the depth. Following a connection must not be
 * fooled into skipping a body, so framing it cannot be sure of (a Content-Length it cannot read, two
 * Content-Lengths that differ, Content-Length with chunked, a bad chunk size, and two Inference-Header-Content-
 * Lengths or Content-Encodings that differ: Triton reads the first of a repeated header, so "N" then "0", or
 * "identity" then "gzip", hid the JSON part Triton parsed) closes the connection, as a read error would: no
 * valid client sends those. Inference-Header-Content-Length is read as Triton reads it
 * (leading_integer), so a client's odd value gets Triton's own answer, not a closed connection. */
enum { HS_LINE, HS_BODY, HS_CHUNK_SIZE, HS_CHUNK_DATA, HS_CHUNK_END, HS_TRAILER, HS_FAIL };
enum { HS_MAX_FD = 1 << 16, HS_LINE_ROOM = 256 };
struct http_scan {
    int state, first_line, chunked, compressed, line_long, in_value, last_char;
    uint64_t content_length, header_length, body_left, json_left;
    int has_length, has_header_length, has_encoding;
    size_t line_used, value_at;
    char line[HS_LINE_ROOM];
    struct json_depth json;
};
static struct http_scan *http_scans[HS_MAX_FD];
static int http_port = 8000;

static void http_port_from_argv(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *value = NULL;
        if (strncmp(argv[i], "--http-port=", 12) == 0) value = argv[i] + 12;
        else if (strcmp(argv[i], "--http-port") == 0 && i + 1 < argc) value = argv[i + 1];
        if (value) http_port = atoi(value);
    }
}

static void http_scan_new_line(struct http_scan *h) {
    h->line_used = 0; h->line_long = 0; h->last_char = 0;
    /* a chunk-size line is all value; a header line's value starts after its ':' */
    h->in_value = h->state == HS_CHUNK_SIZE;
    h->value_at = 0;
}

static void http_scan_request_start(struct http_scan *h) {
    h->state = HS_LINE; h->first_line = 1; h->chunked = h->compressed = 0;
    h->content_length = h->header_length = 0; h->has_length = h->has_header_length = h->has_encoding = 0;
    memset(&h->json, 0, sizeof h->json);
    http_scan_new_line(h);
}

static int header_is(const char *line, const char *name, const char **value) {
    size_t n = strlen(name);
    if (strncasecmp(line, name, n) != 0 || line[n] != ':') return 0;
    *value = line + n + 1;
    return 1;
}

/* The number Triton 2.51 reads from an Inference-Header-Content-Length value: std::atoi, which glibc does as
 * (int)strtol(text, NULL, 10): white space (isspace: \v and \f too) skipped, a sign, the leading digits
 * ("12x" is 12, "abc" 0, which makes the whole body one raw binary input, not JSON), clamped to the range of
 * long, then its low 32 bits. Read as atoll until 2026-12-07: "-4289967277" was 0 here and 5,000,019 to
 * Triton, and "\v5000019" 0 here, so a 5 MB body of '[' reached rapidjson (SIGSEGV; a review). Returns 0
 * when the value's digits ran past the room kept for the line (not sure). */
static int leading_integer(const char *text, int line_long, int64_t *out) {
    while (isspace((unsigned char)*text)) text++;
    int negative = *text == '-';
    if (*text == '-' || *text == '+') text++;
    uint64_t v = 0;
    int overflow = 0;
    while (isdigit((unsigned char)*text)) {
        if (v <= ((uint64_t)INT64_MAX - 9) / 10) v = v * 10 + (uint64_t)(*text - '0');
        else overflow = 1;
        text++;
    }
    if (!*text && line_long) return 0;
    int64_t as_long = overflow ? (negative ? INT64_MIN : INT64_MAX) : (negative ? -(int64_t)v : (int64_t)v);
    *out = (int32_t)(uint32_t)(uint64_t)as_long;  /* (int) of a long: its low 32 bits */
    return 1;
}

/* Whether a request line ("POST /v2/models/m[/versions/v]/generate[?...] HTTP/1.1") names Triton's
 * /generate endpoint, which answers with one response (not /generate_stream). */
static int answers_once(const char *line) {
    const char *target = strchr(line, ' ');
    if (!target) return 0;
    target++;
    size_t length = strcspn(target, " ?");
    static const char suffix[] = "/generate";
    return length >= sizeof suffix - 1 && memcmp(target + length - (sizeof suffix - 1), suffix, sizeof suffix - 1) == 0;
}

static int decimal(const char *text, uint64_t *out) {
    char *end = NULL;
    if (!isdigit((unsigned char)*text)) return 0;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (*end || errno == ERANGE) return 0;
    *out = v;
    return 1;
}

/* One whole line (without "\n", whitespace of values dropped); returns 0 when the framing is not sure. */
static int http_scan_line(struct http_scan *h) {
    char *line = h->line;
    size_t n = h->line_used;
    if (n && line[n - 1] == '\r') n--;
    while (n > h->value_at && h->in_value && (line[n - 1] == ' ' || line[n - 1] == '\t')) n--;  /* trailing OWS */
    line[n] = 0;
    /* Every line this scan reads ends in CRLF, but for blank lines before a request line. A bare LF is read
     * otherwise by evhtp: one straight after the request line it skips and reads on for headers, where this
     * scan took it for the end of them and read the next request's body as a request line: a 5 MB body of
     * '[' went unread (SIGSEGV; a review, 2026-12-07). No client sends bare LFs: one closes the connection. */
    if (h->last_char != '\r' && !(h->state == HS_LINE && h->first_line && n == 0)) return 0;
    if (h->state == HS_CHUNK_SIZE) {
        char *end = NULL;
        errno = 0;
        unsigned long long size = strtoull(line, &end, 16);
        if (end == line || errno == ERANGE || (*end && *end != ';') || (h->line_long && !*end)) return 0;
        h->body_left = size;
        h->state = size ? HS_CHUNK_DATA : HS_TRAILER;
        return 1;
    }
    if (h->state == HS_TRAILER) {
        /* evhtp ends the request at the end of the FIRST trailer line, where this scan read on to a blank
         * line: "0", "X: y" and no blank line made the next request's head a trailer here and its body a
         * request line, so a 5 MB body of '[' went unread (SIGSEGV; a review, 2026-12-07). No client of
         * Triton sends trailers: one closes the connection. */
        if (n != 0) return 0;
        http_scan_request_start(h);
        return 1;
    }
    if (h->first_line) {  /* the request line (blank lines before it are allowed) */
        if (n) {
            h->first_line = 0;
            h->json.watch_stream = !h->line_long && answers_once(line);
        }
        return 1;
    }
    if (n == 0) {  /* end of the headers */
        if (h->chunked && h->has_length) return 0;
        if (h->has_header_length && (!h->has_length || h->header_length <= h->content_length))
            h->json_left = h->header_length;
        else
            h->json_left = h->chunked ? UINT64_MAX : h->content_length;
        if (h->compressed) h->json_left = 0;
        if (h->chunked) { h->state = HS_CHUNK_SIZE; return 1; }
        if (!h->content_length) { http_scan_request_start(h); return 1; }
        h->body_left = h->content_length;
        h->state = HS_BODY;
        return 1;
    }
    /* A header line must be a name (no white space) and ':'. evhtp joins a line that starts with a space or tab
     * (HTTP/1.0's obsolete line folding) onto the previous header's value, so "Content-Length: 5" then
     * "\t000019" was 5000019 bytes to Triton and 5 here, and a 5 MB body nested 5M deep reached rapidjson and
     * killed the server (SIGSEGV; a review, 2026-12-07); "Transfer-Encoding: c" then "\thunked" and a folded
     * Inference-Header-Content-Length hid a body likewise. RFC 9112 lets a server refuse obsolete folding; a
     * name with white space before its ':' is refused for the same reason (which name it is, is not sure). */
    size_t name_length = strcspn(line, ": \t");
    if (name_length == 0 || line[name_length] != ':') return 0;
    const char *value;
    uint64_t number;
    if (header_is(line, "content-length", &value)) {
        if (h->line_long || !decimal(value, &number) || (h->has_length && number != h->content_length)) return 0;
        h->content_length = number;
        h->has_length = 1;
    } else if (header_is(line, "inference-header-content-length", &value)) {
        int64_t length;
        if (!leading_integer(value, h->line_long, &length)) return 0;
        /* Triton reads the FIRST of repeated headers (evhtp_kv_find): a second one that says otherwise
         * ("N" then "0") made this scan skip a JSON part Triton then parsed, nesting and all. A negative
         * one Triton refuses (or reads as it may): the whole body is followed, which is always safe. */
        uint64_t header_length = length < 0 ? UINT64_MAX : (uint64_t)length;
        if (h->has_header_length && header_length != h->header_length) return 0;
        h->header_length = header_length;
        h->has_header_length = 1;
    } else if (header_is(line, "transfer-encoding", &value)) {
        if (h->line_long) return 0;
        if (strcasestr(value, "chunked")) h->chunked = 1;
    } else if (header_is(line, "content-encoding", &value)) {
        if (h->line_long) return 0;
        int compressed = *value && strncasecmp(value, "identity", 8) != 0;
        /* as above: "identity" then "gzip" left the body to the inflate wrapper, and Triton read it plain */
        if (h->has_encoding && compressed != h->compressed) return 0;
        h->compressed = compressed;
        h->has_encoding = 1;
    }
    return 1;
}

static void http_scan_body_bytes(struct http_scan *h, unsigned char *bytes, size_t n) {
    if (!h->json_left || h->json.done) return;
    size_t take = n < h->json_left ? n : (size_t)h->json_left;
    long bad = json_depth_feed(&h->json, bytes, take);
    if (h->json_left != UINT64_MAX) h->json_left -= take;
    if (bad >= 0) {
        bytes[bad] = '#';
        cut_reason = h->json.stream_true ? CUT_STREAM_TRUE : CUT_TOO_DEEP;
        cut_offset = h->json.offset;  /* the JSON offset of the replaced byte */
    }
}

/* A byte of a header or chunk-size line: names kept, a value's leading spaces and zeros dropped (they
 * change nothing and could push the number past the room here); white space after the value's first
 * character is kept (and trailing white space trimmed in http_scan_line). Until 2026-12-07 every space of
 * a value was dropped, so "4011 0699577354" was 40110699577354 here (low 32 bits: 10 bytes of JSON) and
 * 4011 to Triton's atoi, which stops at the space: a 5 MB body of '[' reached rapidjson (SIGSEGV; a third
 * review). */
static void http_scan_line_byte(struct http_scan *h, char c) {
    h->last_char = (unsigned char)c;
    if (!h->first_line && h->state == HS_LINE && !h->in_value) {
        if (c == ':') { h->in_value = 1; h->value_at = h->line_used + 1; }
    } else if (h->in_value && !h->first_line) {
        if ((c == ' ' || c == '\t') && h->line_used <= h->value_at) return;
        if (h->line_used == h->value_at + 1 && h->line[h->value_at] == '0' && isxdigit((unsigned char)c)) {
            h->line[h->value_at] = c;
            return;
        }
    }
    if (h->line_used < HS_LINE_ROOM - 1) h->line[h->line_used++] = c;
    else h->line_long = 1;
}

static void http_scan_feed(struct http_scan *h, unsigned char *bytes, size_t n) {
    size_t i = 0;
    while (i < n && h->state != HS_FAIL) {
        if (h->state == HS_BODY || h->state == HS_CHUNK_DATA) {
            size_t take = n - i < h->body_left ? n - i : (size_t)h->body_left;
            http_scan_body_bytes(h, bytes + i, take);
            h->body_left -= take;
            i += take;
            if (!h->body_left) {
                if (h->state == HS_BODY) http_scan_request_start(h);
                else { h->state = HS_CHUNK_END; h->last_char = 0; }
            }
            continue;
        }
        unsigned char c = bytes[i++];
        if (h->state == HS_CHUNK_END) {  /* the CRLF after a chunk's data (a bare LF: as in http_scan_line) */
            if (c == '\n' && h->last_char == '\r') { h->state = HS_CHUNK_SIZE; http_scan_new_line(h); }
            else if (c != '\r' || h->last_char == '\r') h->state = HS_FAIL;
            else h->last_char = '\r';
            continue;
        }
        if (c == '\n') {
            if (!http_scan_line(h)) { h->state = HS_FAIL; return; }
            if (h->state != HS_BODY && h->state != HS_CHUNK_DATA) http_scan_new_line(h);
            continue;
        }
        http_scan_line_byte(h, (char)c);
    }
}

/* What a wrapped read returns: `got`, or a reset connection once its framing is not sure. */
static ssize_t http_scan_result(struct http_scan *h, ssize_t got) {
    if (h && h->state == HS_FAIL) {
        errno = ECONNRESET;
        return -1;
    }
    return got;
}

static struct http_scan *http_scan_of(int fd) {
    return (enabled && max_json_depth && fd >= 0 && fd < HS_MAX_FD) ? __atomic_load_n(&http_scans[fd], __ATOMIC_ACQUIRE)
                                                                    : NULL;
}

static void http_scan_forget(int fd) {
    if (fd < 0 || fd >= HS_MAX_FD) return;
    struct http_scan *old = __atomic_exchange_n(&http_scans[fd], NULL, __ATOMIC_ACQ_REL);
    free(old);
}

static void http_scan_accepted(int listener, int fd) {
    if (!enabled || !max_json_depth || fd < 0 || fd >= HS_MAX_FD) return;
    http_scan_forget(fd);
    struct sockaddr_storage address;
    socklen_t length = sizeof address;
    if (getsockname(listener, (struct sockaddr *)&address, &length) != 0) return;
    int port = address.ss_family == AF_INET ? ntohs(((struct sockaddr_in *)&address)->sin_port)
             : address.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&address)->sin6_port) : -1;
    if (port != http_port) return;
    struct http_scan *h = calloc(1, sizeof *h);
    if (!h) return;
    http_scan_request_start(h);
    __atomic_store_n(&http_scans[fd], h, __ATOMIC_RELEASE);
}

typedef int (*accept_fn)(int, struct sockaddr *, socklen_t *);
typedef int (*accept4_fn)(int, struct sockaddr *, socklen_t *, int);
typedef ssize_t (*readv_fn)(int, const struct iovec *, int);
typedef ssize_t (*read_fn)(int, void *, size_t);
typedef ssize_t (*recv_fn)(int, void *, size_t, int);
typedef int (*close_fn)(int);

int accept(int listener, struct sockaddr *address, socklen_t *length) {
    static accept_fn next;
    if (!next) next = (accept_fn)real("accept");
    int fd = next(listener, address, length);
    if (fd >= 0) http_scan_accepted(listener, fd);
    return fd;
}

int accept4(int listener, struct sockaddr *address, socklen_t *length, int flags) {
    static accept4_fn next;
    if (!next) next = (accept4_fn)real("accept4");
    int fd = next(listener, address, length, flags);
    if (fd >= 0) http_scan_accepted(listener, fd);
    return fd;
}

ssize_t readv(int fd, const struct iovec *iov, int count) {
    static readv_fn next;
    if (!next) next = (readv_fn)real("readv");
    ssize_t got = next(fd, iov, count);
    struct http_scan *h = got > 0 ? http_scan_of(fd) : NULL;
    size_t left = got > 0 ? (size_t)got : 0;
    for (int i = 0; h && i < count && left; i++) {
        size_t n = left < iov[i].iov_len ? left : iov[i].iov_len;
        http_scan_feed(h, iov[i].iov_base, n);
        left -= n;
    }
    return http_scan_result(h, got);
}

ssize_t read(int fd, void *buffer, size_t size) {
    static read_fn next;
    if (!next) next = (read_fn)real("read");
    ssize_t got = next(fd, buffer, size);
    struct http_scan *h = got > 0 ? http_scan_of(fd) : NULL;
    if (h) http_scan_feed(h, buffer, (size_t)got);
    return http_scan_result(h, got);
}

ssize_t recv(int fd, void *buffer, size_t size, int flags) {
    static recv_fn next;
    if (!next) next = (recv_fn)real("recv");
    ssize_t got = next(fd, buffer, size, flags);
    struct http_scan *h = got > 0 && !(flags & MSG_PEEK) ? http_scan_of(fd) : NULL;
    if (h) http_scan_feed(h, buffer, (size_t)got);
    return http_scan_result(h, got);
}

int close(int fd) {
    static close_fn next;
    if (!next) next = (close_fn)real("close");
    if (fd >= 0 && fd < HS_MAX_FD && __atomic_load_n(&http_scans[fd], __ATOMIC_RELAXED)) http_scan_forget(fd);
    return next(fd);
}

/* ------------------------------------------------------------------ the Python backend's IPC regions
 * Triton 2.51's Python backend (libtriton_python.so, which the onnxruntime_cpu backend runs on too) creates one
 * region per stub, /dev/shm/triton_*_shm_region_<uuid>, through boost::interprocess with its default permissions
 * (0644, set with fchmod after shm_open, so the umask does not apply): every request's inputs and every response
 * passed through them, readable by every local user. The stubs run as the server's user, so the owner's bits
 * are all they need: group and other bits are dropped when the server creates or chmods such a region. */
typedef int (*shm_open_fn)(const char *, int, mode_t);
typedef int (*fchmod_fn)(int, mode_t);

static int is_ipc_region_name(const char *name) {
    while (name && *name == '/') name++;
    return name && strncmp(name, "triton_", 7) == 0;
}

static int is_ipc_region_fd(int fd) {
    char link[64], target[256];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0) return 0;
    target[n] = 0;
    return strncmp(target, "/dev/shm/", 9) == 0 && is_ipc_region_name(target + 9);
}

int shm_open(const char *name, int oflag, mode_t mode) {
    static shm_open_fn next;
    if (!next) next = (shm_open_fn)real("shm_open");
    if (in_server_process && (oflag & O_CREAT) && is_ipc_region_name(name)) mode &= 0700;
    return next(name, oflag, mode);
}

int fchmod(int fd, mode_t mode) {
    static fchmod_fn next;
    if (!next) next = (fchmod_fn)real("fchmod");
    if (in_server_process && (mode & 077) && is_ipc_region_fd(fd)) mode &= 0700;
    return next(fd, mode);
}
