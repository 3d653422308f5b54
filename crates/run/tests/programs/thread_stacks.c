// pthread_getattr_np reports each thread's own stack: the one its stack pointer is in, at least
// as large as it asked for, with its detach state. Go's cgo and Rust's std check their stack
// pointer against these bounds when a thread starts. Prints one line per check; the output
// must be the same under corral-run as plain.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#define CHECK(name, cond) printf("%-52s %s\n", name, (cond) ? "ok" : "FAILED")

struct report {
    int got;
    int inside;
    size_t size;
    int detach;
};

static void report_self(struct report *r) {
    pthread_attr_t attr;
    void *addr = NULL;
    size_t size = 0;
    volatile char here = 0;
    r->got = pthread_getattr_np(pthread_self(), &attr) == 0 &&
             pthread_attr_getstack(&attr, &addr, &size) == 0 &&
             pthread_attr_getdetachstate(&attr, &r->detach) == 0;
    if (r->got)
        pthread_attr_destroy(&attr);
    uintptr_t sp = (uintptr_t)&here;
    r->inside = (uintptr_t)addr < sp && sp < (uintptr_t)addr + size;
    r->size = size;
}

static void *reporter(void *arg) {
    report_self(arg);
    return NULL;
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int detached_done;

static void *detached_reporter(void *arg) {
    report_self(arg);
    pthread_mutex_lock(&lock);
    detached_done = 1;
    pthread_cond_signal(&cv);
    pthread_mutex_unlock(&lock);
    return NULL;
}

#define ASKED (512 * 1024)

int main(void) {
    struct report main_r = {0}, default_r = {0}, sized_r = {0}, detached_r = {0};
    report_self(&main_r);
    CHECK("main: pthread_getattr_np", main_r.got);
    CHECK("main: its stack holds its stack pointer", main_r.inside);

    pthread_t t;
    pthread_create(&t, NULL, reporter, &default_r);
    pthread_join(t, NULL);
    CHECK("default thread: pthread_getattr_np", default_r.got);
    CHECK("default thread: its stack holds its stack pointer", default_r.inside);
    CHECK("default thread: joinable", default_r.detach == PTHREAD_CREATE_JOINABLE);

    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, ASKED);
    pthread_create(&t, &attr, reporter, &sized_r);
    pthread_join(t, NULL);
    CHECK("sized thread: its stack holds its stack pointer", sized_r.inside);
    CHECK("sized thread: at least the size asked for", sized_r.size >= ASKED);

    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_create(&t, &attr, detached_reporter, &detached_r);
    pthread_mutex_lock(&lock);
    while (!detached_done)
        pthread_cond_wait(&cv, &lock);
    pthread_mutex_unlock(&lock);
    pthread_attr_destroy(&attr);
    CHECK("detached thread: its stack holds its stack pointer", detached_r.inside);
    CHECK("detached thread: detached", detached_r.detach == PTHREAD_CREATE_DETACHED);
    return 0;
}
