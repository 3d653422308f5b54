/*
 * Exercises the Corral C API from C. Exits nonzero if any check fails; the last line of output
 * is "N passed, M failed". Built and run by tests/c_programs.rs.
 */
#define _POSIX_C_SOURCE 200809L

#include "corral.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int passed;
static int failed;
/* For the watchdog: a hang should name the test that hung rather than stall the harness. */
static const char *volatile current_test = "(startup)";

#define WATCHDOG_SECONDS 30

static void on_watchdog(int sig) {
    (void)sig;
    static const char prefix[] = "FAIL timed out in ";
    /* Only async-signal-safe calls here. */
    ssize_t ignored = write(STDOUT_FILENO, prefix, sizeof prefix - 1);
    ignored = write(STDOUT_FILENO, current_test, strlen(current_test));
    ignored = write(STDOUT_FILENO, "\n", 1);
    (void)ignored;
    _exit(2);
}

/* Inside a test function: report the failed condition and make the test fail. */
#define CHECK(cond, ...)                                                          \
    do {                                                                          \
        if (!(cond)) {                                                            \
            fprintf(stderr, "  %s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                         \
            fputc('\n', stderr);                                                  \
            return 0;                                                             \
        }                                                                         \
    } while (0)

static void run_test(const char *name, int (*test)(void)) {
    current_test = name;
    if (test()) {
        passed++;
        printf("ok   %s\n", name);
    } else {
        failed++;
        printf("FAIL %s\n", name);
    }
    fflush(stdout);
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- spawn and join ---- */

#define N_SPAWN 1000

static void *square_plus_seven(void *arg) {
    uintptr_t i = (uintptr_t)arg;
    /* Yield so that threads interleave and some are stolen by the other kthread. */
    corral_yield();
    return (void *)(i * i + 7);
}

static int test_spawn_join_1000(void) {
    static corral_thread_t *threads[N_SPAWN];
    for (uintptr_t i = 0; i < N_SPAWN; i++) {
        int rc = corral_spawn(&threads[i], square_plus_seven, (void *)i);
        CHECK(rc == 0, "spawn %lu returned %d", (unsigned long)i, rc);
    }
    for (uintptr_t i = 0; i < N_SPAWN; i++) {
        void *ret = NULL;
        int rc = corral_join(threads[i], &ret);
        CHECK(rc == 0, "join %lu returned %d", (unsigned long)i, rc);
        CHECK((uintptr_t)ret == i * i + 7, "thread %lu returned %lu", (unsigned long)i,
              (unsigned long)(uintptr_t)ret);
    }
    return 1;
}

static void *report_identity(void *arg) {
    (void)arg;
    uint64_t *out = malloc(2 * sizeof *out);
    if (out) {
        out[0] = corral_thread_id();
        out[1] = (uint64_t)(int64_t)corral_kthread_index();
    }
    return out;
}

static int test_thread_identity(void) {
    uint64_t me = corral_thread_id();
    CHECK(me != 0, "main uthread has id 0");
    int k = corral_kthread_index();
    CHECK(k == 0 || k == 1, "kthread index %d with 2 kthreads", k);
    corral_thread_t *t;
    CHECK(corral_spawn(&t, report_identity, NULL) == 0, "spawn failed");
    void *ret;
    CHECK(corral_join(t, &ret) == 0, "join failed");
    uint64_t *ids = ret;
    CHECK(ids != NULL, "malloc failed in the thread");
    uint64_t child = ids[0];
    int64_t child_k = (int64_t)ids[1];
    free(ids);
    CHECK(child != 0 && child != me, "child id %lu, main id %lu", (unsigned long)child,
          (unsigned long)me);
    CHECK(child_k == 0 || child_k == 1, "child kthread index %ld", (long)child_k);
    CHECK(corral_join(NULL, NULL) == -EINVAL, "join(NULL) accepted");
    CHECK(corral_spawn(NULL, square_plus_seven, NULL) == -EINVAL, "spawn(NULL out) accepted");
    CHECK(corral_spawn(&t, NULL, NULL) == -EINVAL, "spawn(NULL fn) accepted");
    return 1;
}

static void *sleep_then_return(void *arg) {
    corral_sleep_us(2000);
    return arg;
}

static int test_detach(void) {
    corral_thread_t *t;
    CHECK(corral_spawn(&t, sleep_then_return, NULL) == 0, "spawn failed");
    CHECK(corral_detach(t) == 0, "detach failed");
    CHECK(corral_detach(NULL) == -EINVAL, "detach(NULL) accepted");
    /* Give the detached thread time to finish before the runtime shuts down. */
    corral_sleep_us(10000);
    return 1;
}

/* ---- mutex ---- */

#define N_LOCKERS 16
#define N_INCREMENTS 10000

struct counter {
    corral_mutex_t *mutex;
    long value;
};

static void *increment_many(void *arg) {
    struct counter *c = arg;
    for (int i = 0; i < N_INCREMENTS; i++) {
        if (corral_mutex_lock(c->mutex) != 0) {
            return (void *)1;
        }
        long v = c->value;
        /* Yielding with the lock held now and then makes the others queue up on it. */
        if (i % 128 == 0) {
            corral_yield();
        }
        c->value = v + 1;
        if (corral_mutex_unlock(c->mutex) != 0) {
            return (void *)1;
        }
    }
    return NULL;
}

static int test_mutex_counter(void) {
    struct counter c = {corral_mutex_new(), 0};
    CHECK(c.mutex != NULL, "mutex_new failed");
    corral_thread_t *threads[N_LOCKERS];
    for (int i = 0; i < N_LOCKERS; i++) {
        CHECK(corral_spawn(&threads[i], increment_many, &c) == 0, "spawn %d failed", i);
    }
    int errors = 0;
    for (int i = 0; i < N_LOCKERS; i++) {
        void *ret;
        CHECK(corral_join(threads[i], &ret) == 0, "join %d failed", i);
        errors += ret != NULL;
    }
    CHECK(errors == 0, "%d threads saw lock/unlock errors", errors);
    CHECK(c.value == (long)N_LOCKERS * N_INCREMENTS, "counter is %ld, expected %ld", c.value,
          (long)N_LOCKERS * N_INCREMENTS);
    CHECK(corral_mutex_free(c.mutex) == 0, "free of an unlocked mutex failed");
    return 1;
}

static void *try_and_unlock(void *arg) {
    corral_mutex_t *m = arg;
    intptr_t trylock = corral_mutex_trylock(m);
    intptr_t unlock = corral_mutex_unlock(m);
    /* Pack both results: neither may succeed while the main thread holds the mutex. */
    return (void *)(uintptr_t)((trylock == -EBUSY) && (unlock == -EPERM));
}

static int test_mutex_errors(void) {
    corral_mutex_t *m = corral_mutex_new();
    CHECK(m != NULL, "mutex_new failed");
    CHECK(corral_mutex_unlock(m) == -EPERM, "unlock of an unlocked mutex accepted");
    CHECK(corral_mutex_trylock(m) == 0, "trylock of a free mutex failed");
    CHECK(corral_mutex_lock(m) == -EDEADLK, "relock by the holder not reported");
    CHECK(corral_mutex_trylock(m) == -EBUSY, "trylock by the holder succeeded");
    corral_thread_t *t;
    CHECK(corral_spawn(&t, try_and_unlock, m) == 0, "spawn failed");
    void *ok;
    CHECK(corral_join(t, &ok) == 0, "join failed");
    CHECK(ok != NULL, "another thread could trylock or unlock a held mutex");
    /* A failed trylock must leave the holder's lock in place. */
    CHECK(corral_mutex_trylock(m) == -EBUSY, "mutex was released by a failed trylock");
    CHECK(corral_mutex_free(m) == -EBUSY, "free of a locked mutex accepted");
    CHECK(corral_mutex_unlock(m) == 0, "unlock by the holder failed");
    CHECK(corral_mutex_free(m) == 0, "free failed");
    CHECK(corral_mutex_free(NULL) == 0, "free(NULL) failed");
    CHECK(corral_mutex_lock(NULL) == -EINVAL, "lock(NULL) accepted");
    return 1;
}

/* ---- condition variable: bounded queue ---- */

#define N_ITEMS 100000
#define QUEUE_CAP 64

struct queue {
    corral_mutex_t *mutex;
    corral_condvar_t *not_empty;
    corral_condvar_t *not_full;
    long items[QUEUE_CAP];
    size_t head;
    size_t len;
};

static void *produce(void *arg) {
    struct queue *q = arg;
    for (long i = 0; i < N_ITEMS; i++) {
        corral_mutex_lock(q->mutex);
        while (q->len == QUEUE_CAP) {
            corral_condvar_wait(q->not_full, q->mutex);
        }
        q->items[(q->head + q->len) % QUEUE_CAP] = i;
        q->len++;
        corral_condvar_signal(q->not_empty);
        corral_mutex_unlock(q->mutex);
    }
    return NULL;
}

static void *consume(void *arg) {
    struct queue *q = arg;
    for (long expected = 0; expected < N_ITEMS; expected++) {
        corral_mutex_lock(q->mutex);
        while (q->len == 0) {
            corral_condvar_wait(q->not_empty, q->mutex);
        }
        long item = q->items[q->head];
        q->head = (q->head + 1) % QUEUE_CAP;
        q->len--;
        corral_condvar_signal(q->not_full);
        corral_mutex_unlock(q->mutex);
        if (item != expected) {
            fprintf(stderr, "  consumer got %ld, expected %ld\n", item, expected);
            return (void *)1;
        }
    }
    return NULL;
}

static int test_producer_consumer(void) {
    static struct queue q;
    q.mutex = corral_mutex_new();
    q.not_empty = corral_condvar_new();
    q.not_full = corral_condvar_new();
    CHECK(q.mutex && q.not_empty && q.not_full, "allocation failed");
    corral_thread_t *consumer, *producer;
    CHECK(corral_spawn(&consumer, consume, &q) == 0, "spawn consumer failed");
    CHECK(corral_spawn(&producer, produce, &q) == 0, "spawn producer failed");
    void *bad;
    CHECK(corral_join(producer, NULL) == 0, "join producer failed");
    CHECK(corral_join(consumer, &bad) == 0, "join consumer failed");
    CHECK(bad == NULL, "items arrived out of order");
    CHECK(q.len == 0, "%zu items left over", q.len);
    corral_condvar_free(q.not_empty);
    corral_condvar_free(q.not_full);
    CHECK(corral_mutex_free(q.mutex) == 0, "mutex free failed");
    return 1;
}

/* ---- condition variable: timed waits ---- */

static int test_timedwait_times_out(void) {
    corral_mutex_t *m = corral_mutex_new();
    corral_condvar_t *cv = corral_condvar_new();
    CHECK(m && cv, "allocation failed");
    CHECK(corral_mutex_lock(m) == 0, "lock failed");
    const uint64_t timeouts_us[] = {1, 1000, 20000};
    for (size_t i = 0; i < sizeof timeouts_us / sizeof timeouts_us[0]; i++) {
        uint64_t start = now_ns();
        int rc = corral_condvar_timedwait(cv, m, timeouts_us[i]);
        uint64_t elapsed = now_ns() - start;
        CHECK(rc == -ETIMEDOUT, "timedwait(%lu us) returned %d", (unsigned long)timeouts_us[i],
              rc);
        CHECK(elapsed >= timeouts_us[i] * 1000, "timedwait(%lu us) returned after %lu ns",
              (unsigned long)timeouts_us[i], (unsigned long)elapsed);
    }
    /* Still held after timing out: only the holder can unlock. */
    CHECK(corral_mutex_unlock(m) == 0, "mutex not held after a timed-out wait");
    CHECK(corral_condvar_timedwait(cv, m, 1000) == -EPERM, "wait without the mutex accepted");
    CHECK(corral_condvar_wait(cv, NULL) == -EINVAL, "wait(NULL mutex) accepted");
    corral_condvar_free(cv);
    CHECK(corral_mutex_free(m) == 0, "mutex free failed");
    return 1;
}

struct flag {
    corral_mutex_t *mutex;
    corral_condvar_t *cv;
    int set;
};

static void *set_flag(void *arg) {
    struct flag *f = arg;
    corral_sleep_us(1000);
    corral_mutex_lock(f->mutex);
    f->set = 1;
    corral_mutex_unlock(f->mutex);
    corral_condvar_broadcast(f->cv);
    return NULL;
}

static int test_timedwait_wakes(void) {
    struct flag f = {corral_mutex_new(), corral_condvar_new(), 0};
    CHECK(f.mutex && f.cv, "allocation failed");
    corral_thread_t *t;
    CHECK(corral_spawn(&t, set_flag, &f) == 0, "spawn failed");
    corral_mutex_lock(f.mutex);
    uint64_t start = now_ns();
    int rc = 0;
    while (!f.set && rc == 0) {
        rc = corral_condvar_timedwait(f.cv, f.mutex, 10 * 1000 * 1000);
    }
    uint64_t elapsed = now_ns() - start;
    corral_mutex_unlock(f.mutex);
    CHECK(rc == 0, "timedwait returned %d although signalled", rc);
    CHECK(elapsed < 5ull * 1000 * 1000 * 1000, "signalled wait took %lu ns",
          (unsigned long)elapsed);
    CHECK(corral_join(t, NULL) == 0, "join failed");
    corral_condvar_free(f.cv);
    CHECK(corral_mutex_free(f.mutex) == 0, "mutex free failed");
    return 1;
}

/* ---- wait group ---- */

#define N_DETACHED 100

struct group {
    corral_waitgroup_t *wg;
    atomic_int finished;
};

static void finish_one(void *arg) {
    struct group *g = arg;
    corral_sleep_us((uint64_t)(corral_thread_id() % 7) * 100);
    atomic_fetch_add(&g->finished, 1);
    corral_waitgroup_done(g->wg);
}

static int test_waitgroup_detached(void) {
    /* Repeated so that some rounds free the group while a done() call is still returning. */
    for (int round = 0; round < 20; round++) {
        struct group g;
        g.wg = corral_waitgroup_new();
        atomic_init(&g.finished, 0);
        CHECK(g.wg != NULL, "waitgroup_new failed");
        CHECK(corral_waitgroup_add(g.wg, N_DETACHED) == 0, "add failed");
        for (int i = 0; i < N_DETACHED; i++) {
            CHECK(corral_spawn_detached(finish_one, &g) == 0, "spawn_detached %d failed", i);
        }
        CHECK(corral_waitgroup_wait(g.wg) == 0, "wait failed");
        int finished = atomic_load(&g.finished);
        CHECK(finished == N_DETACHED, "round %d: wait returned with %d of %d done", round,
              finished, N_DETACHED);
        CHECK(corral_waitgroup_done(g.wg) == -EINVAL, "done below zero accepted");
        corral_waitgroup_free(g.wg);
    }
    return 1;
}

/* ---- wake-ups from plain OS threads ---- */

static void *done_after_20ms(void *arg) {
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    corral_waitgroup_done(arg);
    return NULL;
}

/* Blocks the calling uthread on a wait group that a plain pthread completes: by then every
 * kernel thread of the runtime may be asleep, and the pthread's wake-up must rouse one. */
static int wait_for_pthread(void) {
    corral_waitgroup_t *wg = corral_waitgroup_new();
    CHECK(wg != NULL, "waitgroup_new failed");
    CHECK(corral_waitgroup_add(wg, 1) == 0, "add failed");
    pthread_t t;
    CHECK(pthread_create(&t, NULL, done_after_20ms, wg) == 0, "pthread_create failed");
    uint64_t start = now_ns();
    CHECK(corral_waitgroup_wait(wg) == 0, "wait failed");
    uint64_t elapsed = now_ns() - start;
    pthread_join(t, NULL);
    corral_waitgroup_free(wg);
    CHECK(elapsed >= 20ull * 1000 * 1000, "wait returned after %lu ns, before the pthread's done",
          (unsigned long)elapsed);
    return 1;
}

/* ---- sleeping ---- */

static int test_sleep_not_early(void) {
    const uint64_t durations_us[] = {0, 1, 500, 5000, 20000};
    for (size_t i = 0; i < sizeof durations_us / sizeof durations_us[0]; i++) {
        uint64_t start = now_ns();
        corral_sleep_us(durations_us[i]);
        uint64_t elapsed = now_ns() - start;
        CHECK(elapsed >= durations_us[i] * 1000, "sleep(%lu us) returned after %lu ns",
              (unsigned long)durations_us[i], (unsigned long)elapsed);
    }
    return 1;
}

/* ---- runtime ---- */

static void run_in_runtime(void *arg) {
    (void)arg;
    run_test("thread_identity", test_thread_identity);
    run_test("spawn_join_1000", test_spawn_join_1000);
    run_test("detach", test_detach);
    run_test("mutex_counter", test_mutex_counter);
    run_test("mutex_errors", test_mutex_errors);
    run_test("producer_consumer", test_producer_consumer);
    run_test("timedwait_times_out", test_timedwait_times_out);
    run_test("timedwait_wakes", test_timedwait_wakes);
    run_test("waitgroup_detached", test_waitgroup_detached);
    run_test("sleep_not_early", test_sleep_not_early);
    run_test("pthread_wakes_uthread", wait_for_pthread);
}

static void never_called(void *arg) {
    *(int *)arg = 1;
}

static int test_bad_config(void) {
    struct corral_config cfg;
    corral_config_default(&cfg);
    CHECK(cfg.kthreads >= 1, "default kthreads is %u", cfg.kthreads);
    cfg.kthreads = 0;
    int called = 0;
    int rc = corral_run(&cfg, never_called, &called);
    CHECK(rc == -EINVAL, "kthreads = 0 returned %d", rc);
    corral_config_default(&cfg);
    cfg.stack_size = 1;
    rc = corral_run(&cfg, never_called, &called);
    CHECK(rc == -EINVAL, "stack_size = 1 returned %d", rc);
    CHECK(corral_run(NULL, NULL, NULL) == -EINVAL, "NULL main_fn accepted");
    CHECK(!called, "main_fn ran despite a bad config");
    return 1;
}

static int test_outside_runtime(void) {
    corral_thread_t *t = NULL;
    CHECK(corral_spawn(&t, square_plus_seven, NULL) == -EPERM, "spawn outside a runtime");
    CHECK(t == NULL, "handle written on failure");
    CHECK(corral_spawn_detached(never_called, NULL) == -EPERM, "detached spawn outside");
    CHECK(corral_thread_id() == 0, "thread id outside a runtime");
    CHECK(corral_kthread_index() == -1, "kthread index outside a runtime");
    return 1;
}

static void single_kthread_main(void *arg) {
    *(int *)arg = wait_for_pthread() ? 42 : -1;
}

/* A runtime with a single kernel thread must still pick up work handed to it from outside,
 * both its main uthread and wake-ups coming from a plain pthread. */
static int test_single_kthread_run(void) {
    struct corral_config cfg;
    corral_config_default(&cfg);
    cfg.kthreads = 1;
    int value = 0;
    CHECK(corral_run(&cfg, single_kthread_main, &value) == 0, "corral_run failed");
    CHECK(value == 42, "main_fn did not run, or its pthread wake-up failed (%d)", value);
    return 1;
}

int main(void) {
    signal(SIGALRM, on_watchdog);
    alarm(WATCHDOG_SECONDS);

    run_test("bad_config", test_bad_config);
    run_test("outside_runtime", test_outside_runtime);

    struct corral_config cfg;
    corral_config_default(&cfg);
    cfg.kthreads = 2;
    int rc = corral_run(&cfg, run_in_runtime, NULL);
    if (rc != 0) {
        fprintf(stderr, "corral_run failed: %d\n", rc);
        failed++;
    }
    /* Last: if it hangs, the watchdog ends the program after everything else has reported. */
    run_test("single_kthread_run", test_single_kthread_run);

    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
