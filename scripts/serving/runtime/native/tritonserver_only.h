/*
 * Whether this process is `tritonserver`. The preloaded helpers are inherited by every process the
 * server starts (the Python backend stubs), and each acts only in the server itself.
 */
#ifndef TRITONSERVER_ONLY_H
#define TRITONSERVER_ONLY_H

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int running_in_tritonserver(void) {
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return 0;
    exe[n] = 0;
    const char *base = strrchr(exe, '/');
    base = base ? base + 1 : exe;
    return strcmp(base, "tritonserver") == 0;
}

/*
 * In tritonserver, take the library holding `self` (any of its own functions) out of LD_PRELOAD,
 * so the processes the server starts (the Python backend stubs, which fork and exec with its
 * environment) do not load it: each helper acts only in the server, and interposing on a stub's
 * own libraries could only hurt it (a stub's Python loads zlib privately, out of RTLD_NEXT's reach,
 * so deflateInit through the gzip helper failed there with Z_VERSION_ERROR). Runs in a constructor,
 * before main() and any thread; every other entry of LD_PRELOAD is kept as it was.
 */
static void keep_out_of_children(const void *self) {
    Dl_info info;
    const char *preload = getenv("LD_PRELOAD");
    char mine[PATH_MAX], other[PATH_MAX];
    if (!preload || !dladdr(self, &info) || !info.dli_fname || !realpath(info.dli_fname, mine))
        return;
    size_t length = strlen(preload);
    char *kept = malloc(length + 1), *list = strdup(preload);
    if (!kept || !list) {
        free(kept);
        free(list);
        return;
    }
    kept[0] = 0;
    char *state = NULL;
    for (char *entry = strtok_r(list, ": ", &state); entry; entry = strtok_r(NULL, ": ", &state)) {
        if (realpath(entry, other) && strcmp(other, mine) == 0)
            continue;
        if (kept[0])
            strcat(kept, ":");
        strcat(kept, entry);
    }
    if (kept[0])
        setenv("LD_PRELOAD", kept, 1);
    else
        unsetenv("LD_PRELOAD");
    free(kept);
    free(list);
}

/* Whether the helper holding `self` acts in this process (tritonserver); there it is also taken out
 * of LD_PRELOAD for the server's children (keep_out_of_children). For the helpers' constructors. */
static int acting_in_this_process(const void *self) {
    if (!running_in_tritonserver())
        return 0;
    keep_out_of_children(self);
    return 1;
}

#endif
