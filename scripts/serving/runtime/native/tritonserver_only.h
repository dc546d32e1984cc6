/*
 * Whether this process is `tritonserver`. The preloaded helpers are inherited by every process the
 * server starts (the Python backend stubs), and each acts only in the server itself.
 */
#ifndef TRITONSERVER_ONLY_H
#define TRITONSERVER_ONLY_H

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

#endif
