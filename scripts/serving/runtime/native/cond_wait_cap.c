/*
 * cond_wait_cap: turns Triton 2.51's long condition-variable waits into periodic re-checks.
 *
 * Why (docs/triton-batcher-stall.md): with priority levels or queue policies, Triton 2.51's
 * dynamic batcher waits for a free model instance in
 * `cv_.wait_for(slot_lock, 500 ms, predicate)` where `slot_lock` is a LOCAL mutex that none of
 * the notifiers hold (Enqueue holds the scheduler's `mu_`, the execution-end callback holds
 * nothing). A notify that lands between the batcher evaluating the predicate and starting to
 * wait is lost, and nothing else wakes it: the queued requests wait out the full 500 ms. No
 * setting of Triton 2.51 avoids it (measured: instances, delay, preferred sizes, docs).
 *
 * What this does: preloaded into `tritonserver` (LD_PRELOAD, set by serving.runtime.server), it caps any
 * timed wait longer than SERVING_COND_WAIT_LONGER_THAN_US (default 100 ms) at
 * SERVING_COND_WAIT_CAP_US (set by the launcher from serving.toml's cond_wait_cap_us, 10 ms by default). The early return is a spurious
 * wake-up (0, never ETIMEDOUT before the caller's own deadline), which every condition-variable wait
 * must tolerate: the standard library's predicate
 * form re-evaluates the predicate and keeps waiting, the plain form returns and the caller's loop
 * re-checks its state. So a lost notify now costs at most the cap instead of 500 ms, and nothing
 * else changes: the same queues, priorities, timeouts and 503s, decided by Triton's own code.
 * Short waits (batching delays, timers under the threshold) are untouched. It is inert in any
 * process that is not `tritonserver` (the backend stubs inherit the environment).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tritonserver_only.h"

typedef int (*clockwait_fn)(pthread_cond_t *, pthread_mutex_t *, clockid_t, const struct timespec *);
typedef int (*timedwait_fn)(pthread_cond_t *, pthread_mutex_t *, const struct timespec *);

static clockwait_fn real_clockwait;
static timedwait_fn real_timedwait;
static long long cap_ns;                          /* 0: inactive */
static long long longer_than_ns = 100000000LL;    /* only waits longer than this are capped */

static void resolve(void) {
    if (!real_clockwait)
        real_clockwait = (clockwait_fn)dlvsym(RTLD_NEXT, "pthread_cond_clockwait", "GLIBC_2.34");
    if (!real_timedwait)
        real_timedwait = (timedwait_fn)dlvsym(RTLD_NEXT, "pthread_cond_timedwait", "GLIBC_2.3.2");
}

__attribute__((constructor)) static void cond_wait_cap_init(void) {
    resolve();
    if (!acting_in_this_process((const void *)cond_wait_cap_init))
        return;
    const char *cap = getenv("SERVING_COND_WAIT_CAP_US");
    const char *longer = getenv("SERVING_COND_WAIT_LONGER_THAN_US");
    if (longer && atoll(longer) > 0)
        longer_than_ns = atoll(longer) * 1000LL;
    if (cap && atoll(cap) > 0 && real_clockwait && real_timedwait)
        cap_ns = atoll(cap) * 1000LL;
}

/* Whether `abstime` is further than the threshold from `now` (no overflow for far-off deadlines). */
static int further_than_threshold(const struct timespec *abstime, const struct timespec *now) {
    long long seconds;
    if (__builtin_sub_overflow((long long)abstime->tv_sec, (long long)now->tv_sec, &seconds))
        return abstime->tv_sec > now->tv_sec;
    if (seconds > longer_than_ns / 1000000000LL + 1)
        return 1;
    if (seconds < 0)
        return 0;
    return seconds * 1000000000LL + (abstime->tv_nsec - now->tv_nsec) > longer_than_ns;
}

/* The deadline to wait for: `abstime`, or now + cap when `abstime` is further than the threshold.
 * An invalid `abstime` is passed on as it is, so the caller still gets its EINVAL. */
static const struct timespec *capped(clockid_t clock, const struct timespec *abstime, struct timespec *out) {
    struct timespec now;
    if (cap_ns <= 0 || abstime == NULL || abstime->tv_nsec < 0 || abstime->tv_nsec >= 1000000000L ||
        clock_gettime(clock, &now) != 0 || !further_than_threshold(abstime, &now))
        return abstime;
    long long nsec = now.tv_nsec + cap_ns;
    out->tv_sec = now.tv_sec + (time_t)(nsec / 1000000000LL);
    out->tv_nsec = (long)(nsec % 1000000000LL);
    return out;
}

/* A capped wait that timed out before the caller's own deadline is a spurious wake-up: 0. Callers
 * that read ETIMEDOUT as "my deadline passed" (boost, libevent, C code) must not see it early. */
static int result(int rc, clockid_t clock, const struct timespec *abstime, const struct timespec *waited) {
    struct timespec now;
    if (rc != ETIMEDOUT || waited == abstime || clock_gettime(clock, &now) != 0)
        return rc;
    int passed = now.tv_sec > abstime->tv_sec || (now.tv_sec == abstime->tv_sec && now.tv_nsec >= abstime->tv_nsec);
    return passed ? ETIMEDOUT : 0;
}

int pthread_cond_clockwait(pthread_cond_t *cond, pthread_mutex_t *mutex, clockid_t clock, const struct timespec *abstime) {
    struct timespec deadline;
    resolve();
    const struct timespec *waited = capped(clock, abstime, &deadline);
    return result(real_clockwait(cond, mutex, clock, waited), clock, abstime, waited);
}

int pthread_cond_timedwait(pthread_cond_t *cond, pthread_mutex_t *mutex, const struct timespec *abstime) {
    struct timespec deadline;
    resolve();
    const struct timespec *waited = capped(CLOCK_REALTIME, abstime, &deadline);
    return result(real_timedwait(cond, mutex, waited), CLOCK_REALTIME, abstime, waited);
}
