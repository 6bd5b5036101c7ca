/*
 * The clock shim: preloaded into a process (LD_PRELOAD), it moves that process's wall clock by
 * a whole number of seconds read from the file HERMES_CLOCK_OFFSET_FILE names ("+86400\n").
 *
 * Only the wall clock moves: CLOCK_REALTIME and CLOCK_REALTIME_COARSE through clock_gettime,
 * and gettimeofday, time and timespec_get, which read the same clock. The monotonic and boot
 * clocks, which a process measures its waits with, are passed through untouched.
 *
 * The file is read on every call, so a test that swaps it (write a new file, rename it over the
 * old one) moves the clock of every process using it at once. A missing or unreadable file is
 * an offset of 0. errno is left as the caller had it, as a successful clock call leaves it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define OFFSET_FILE_VARIABLE "HERMES_CLOCK_OFFSET_FILE"

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);

static clock_gettime_fn real_clock_gettime;

/* The C library's own clock_gettime (with its fast vDSO path), or the system call when it cannot
 * be found. */
static int read_real_clock(clockid_t clock, struct timespec *now) {
    clock_gettime_fn real = __atomic_load_n(&real_clock_gettime, __ATOMIC_ACQUIRE);
    if (real == NULL) {
        real = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
        if (real != NULL) {
            __atomic_store_n(&real_clock_gettime, real, __ATOMIC_RELEASE);
        }
    }
    if (real != NULL) {
        return real(clock, now);
    }
    return (int)syscall(SYS_clock_gettime, clock, now);
}

/* Seconds the wall clock is moved by: the file's leading signed integer, 0 without one. */
static long long offset_seconds(void) {
    const char *path = getenv(OFFSET_FILE_VARIABLE);
    if (path == NULL || path[0] == '\0') {
        return 0;
    }
    int saved_errno = errno;
    long long offset = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        char text[32];
        ssize_t length = read(fd, text, sizeof text - 1);
        close(fd);
        if (length > 0) {
            text[length] = '\0';
            offset = strtoll(text, NULL, 10);
        }
    }
    errno = saved_errno;
    return offset;
}

static int is_wall_clock(clockid_t clock) {
    return clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE;
}

int clock_gettime(clockid_t clock, struct timespec *now) {
    int status = read_real_clock(clock, now);
    if (status == 0 && is_wall_clock(clock)) {
        now->tv_sec += (time_t)offset_seconds();
    }
    return status;
}

int gettimeofday(struct timeval *restrict now, void *restrict zone) {
    if (zone != NULL) {
        /* The obsolete time zone argument: the kernel's answer, as the C library gives it. */
        struct timezone *tz = zone;
        tz->tz_minuteswest = 0;
        tz->tz_dsttime = 0;
    }
    struct timespec wall;
    int status = clock_gettime(CLOCK_REALTIME, &wall);
    if (status == 0) {
        now->tv_sec = wall.tv_sec;
        now->tv_usec = wall.tv_nsec / 1000;
    }
    return status;
}

time_t time(time_t *out) {
    struct timespec wall;
    if (clock_gettime(CLOCK_REALTIME, &wall) != 0) {
        return (time_t)-1;
    }
    if (out != NULL) {
        *out = wall.tv_sec;
    }
    return wall.tv_sec;
}

int timespec_get(struct timespec *now, int base) {
    if (base != TIME_UTC || clock_gettime(CLOCK_REALTIME, now) != 0) {
        return 0;
    }
    return base;
}
