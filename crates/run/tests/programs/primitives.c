// Every synchronization and waiting call the shim interposes, each checked for its POSIX
// result. Prints one line per check; the output must be the same under corral-run as plain.
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#define CHECK(name, cond) printf("%-40s %s\n", name, (cond) ? "ok" : "FAILED")

static long long now_ns(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
static struct timespec in_ms(clockid_t c, long ms) {
    long long t = now_ns(c) + ms * 1000000LL;
    struct timespec ts = {t / 1000000000LL, t % 1000000000LL};
    return ts;
}

static pthread_mutex_t held = PTHREAD_MUTEX_INITIALIZER;
static void *try_held(void *arg) {
    (void)arg;
    long r = pthread_mutex_trylock(&held);
    struct timespec ts = in_ms(CLOCK_REALTIME, 30);
    long t = pthread_mutex_timedlock(&held, &ts);
    return (void *)(r * 1000 + t);
}

static pthread_mutex_t cm = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int ready;
static void *signaller(void *arg) {
    (void)arg;
    usleep(5000);
    pthread_mutex_lock(&cm);
    ready = 1;
    pthread_cond_signal(&cv);
    pthread_mutex_unlock(&cm);
    return NULL;
}

static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static void *try_write(void *arg) {
    (void)arg;
    return (void *)(long)pthread_rwlock_trywrlock(&rw);
}
static void *try_read(void *arg) {
    (void)arg;
    long r = pthread_rwlock_tryrdlock(&rw);
    struct timespec ts = in_ms(CLOCK_REALTIME, 10);
    return (void *)(r * 1000 + pthread_rwlock_timedrdlock(&rw, &ts));
}

#define BARRIER_THREADS 8
static pthread_barrier_t barrier;
static int serial_count, phase_errors, phase;
static pthread_mutex_t bm = PTHREAD_MUTEX_INITIALIZER;
static void *barrier_body(void *arg) {
    (void)arg;
    for (int round = 0; round < 50; round++) {
        if (pthread_barrier_wait(&barrier) == PTHREAD_BARRIER_SERIAL_THREAD) {
            pthread_mutex_lock(&bm);
            serial_count++;
            phase = round + 1;
            pthread_mutex_unlock(&bm);
        }
        pthread_barrier_wait(&barrier);
        pthread_mutex_lock(&bm);
        if (phase != round + 1) phase_errors++;
        pthread_mutex_unlock(&bm);
    }
    return NULL;
}

static pthread_spinlock_t spin;
static long spin_total;
static void *spin_body(void *arg) {
    (void)arg;
    for (int i = 0; i < 10000; i++) {
        pthread_spin_lock(&spin);
        spin_total++;
        if (i % 100 == 0) sched_yield();
        pthread_spin_unlock(&spin);
    }
    return NULL;
}

static sem_t sem;
static void *sem_poster(void *arg) {
    (void)arg;
    for (int i = 0; i < 1000; i++) sem_post(&sem);
    return NULL;
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int once_runs;
static void once_routine(void) { usleep(2000); once_runs++; }
static void *once_body(void *arg) { (void)arg; pthread_once(&once, once_routine); return NULL; }

int main(void) {
    pthread_t t, ts[BARRIER_THREADS];
    void *r;

    // Normal mutex: trylock and timedlock on a held mutex from another thread.
    pthread_mutex_lock(&held);
    pthread_create(&t, NULL, try_held, NULL);
    pthread_join(t, &r);
    pthread_mutex_unlock(&held);
    CHECK("mutex trylock EBUSY, timedlock ETIMEDOUT", (long)r == EBUSY * 1000 + ETIMEDOUT);

    // Recursive and error-checking mutexes.
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_t rec;
    pthread_mutex_init(&rec, &a);
    int ok = pthread_mutex_lock(&rec) == 0 && pthread_mutex_lock(&rec) == 0 &&
             pthread_mutex_trylock(&rec) == 0 && pthread_mutex_unlock(&rec) == 0 &&
             pthread_mutex_unlock(&rec) == 0 && pthread_mutex_unlock(&rec) == 0 &&
             pthread_mutex_unlock(&rec) == EPERM;
    CHECK("recursive mutex", ok);
    pthread_mutex_t rec_static = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
    ok = pthread_mutex_lock(&rec_static) == 0 && pthread_mutex_lock(&rec_static) == 0 &&
         pthread_mutex_unlock(&rec_static) == 0 && pthread_mutex_unlock(&rec_static) == 0;
    CHECK("recursive mutex, static initializer", ok);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK);
    pthread_mutex_t ec;
    pthread_mutex_init(&ec, &a);
    ok = pthread_mutex_lock(&ec) == 0 && pthread_mutex_lock(&ec) == EDEADLK &&
         pthread_mutex_unlock(&ec) == 0 && pthread_mutex_unlock(&ec) == EPERM;
    CHECK("error-checking mutex", ok);

    // Condition variables: a signal wakes the waiter; timed waits time out on both clocks.
    pthread_create(&t, NULL, signaller, NULL);
    pthread_mutex_lock(&cm);
    while (!ready) pthread_cond_wait(&cv, &cm);
    pthread_mutex_unlock(&cm);
    pthread_join(t, NULL);
    CHECK("condvar signal", ready == 1);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_t mono;
    pthread_cond_init(&mono, &ca);
    pthread_mutex_lock(&cm);
    long long start = now_ns(CLOCK_MONOTONIC);
    struct timespec dl = in_ms(CLOCK_MONOTONIC, 20);
    int rc = pthread_cond_timedwait(&mono, &cm, &dl);
    long long waited = now_ns(CLOCK_MONOTONIC) - start;
    CHECK("condvar timedwait CLOCK_MONOTONIC", rc == ETIMEDOUT && waited >= 20000000LL);
    dl = in_ms(CLOCK_REALTIME, 10);
    CHECK("condvar timedwait CLOCK_REALTIME", pthread_cond_timedwait(&cv, &cm, &dl) == ETIMEDOUT);
    pthread_mutex_unlock(&cm);

    // Rwlocks: readers share, a writer is refused while they read.
    ok = pthread_rwlock_rdlock(&rw) == 0 && pthread_rwlock_tryrdlock(&rw) == 0;
    pthread_create(&t, NULL, try_write, NULL);
    pthread_join(t, &r);
    ok = ok && (long)r == EBUSY && pthread_rwlock_unlock(&rw) == 0 && pthread_rwlock_unlock(&rw) == 0;
    ok = ok && pthread_rwlock_wrlock(&rw) == 0;
    pthread_create(&t, NULL, try_read, NULL);
    pthread_join(t, &r);
    ok = ok && (long)r == EBUSY * 1000 + ETIMEDOUT && pthread_rwlock_unlock(&rw) == 0;
    CHECK("rwlock", ok);

    // Barriers: one serial thread per round, nobody passes early.
    pthread_barrier_init(&barrier, NULL, BARRIER_THREADS);
    for (int i = 0; i < BARRIER_THREADS; i++) pthread_create(&ts[i], NULL, barrier_body, NULL);
    for (int i = 0; i < BARRIER_THREADS; i++) pthread_join(ts[i], NULL);
    CHECK("barrier", serial_count == 50 && phase_errors == 0);

    // Spinlocks.
    pthread_spin_init(&spin, 0);
    for (int i = 0; i < 4; i++) pthread_create(&ts[i], NULL, spin_body, NULL);
    for (int i = 0; i < 4; i++) pthread_join(ts[i], NULL);
    CHECK("spinlock", spin_total == 40000 && pthread_spin_trylock(&spin) == 0 &&
                          pthread_spin_trylock(&spin) == EBUSY);

    // Semaphores.
    sem_init(&sem, 0, 0);
    pthread_create(&t, NULL, sem_poster, NULL);
    for (int i = 0; i < 1000; i++) sem_wait(&sem);
    pthread_join(t, NULL);
    int value = -1;
    sem_getvalue(&sem, &value);
    ok = value == 0 && sem_trywait(&sem) == -1 && errno == EAGAIN;
    dl = in_ms(CLOCK_REALTIME, 10);
    ok = ok && sem_timedwait(&sem, &dl) == -1 && errno == ETIMEDOUT;
    CHECK("semaphore", ok);

    // pthread_once: one run, everybody waits for it.
    for (int i = 0; i < 4; i++) pthread_create(&ts[i], NULL, once_body, NULL);
    for (int i = 0; i < 4; i++) pthread_join(ts[i], NULL);
    CHECK("pthread_once", once_runs == 1);

    // Sleeping and yielding.
    start = now_ns(CLOCK_MONOTONIC);
    struct timespec ten_ms = {0, 10000000};
    ok = nanosleep(&ten_ms, NULL) == 0 && usleep(10000) == 0 &&
         clock_nanosleep(CLOCK_MONOTONIC, 0, &ten_ms, NULL) == 0;
    dl = in_ms(CLOCK_MONOTONIC, 10);
    ok = ok && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &dl, NULL) == 0 && sleep(0) == 0;
    ok = ok && sched_yield() == 0 && now_ns(CLOCK_MONOTONIC) - start >= 40000000LL;
    CHECK("nanosleep usleep clock_nanosleep sleep", ok);
    struct timespec bad = {0, 1000000000};
    CHECK("nanosleep EINVAL", nanosleep(&bad, NULL) == -1 && errno == EINVAL);

    // Detached threads and pthread_self/pthread_equal.
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&at, 1 << 20);
    ok = pthread_create(&t, &at, once_body, NULL) == 0;
    CHECK("detached thread with a stack size", ok);
    CHECK("pthread_self, pthread_equal", pthread_equal(pthread_self(), pthread_self()) &&
                                              !pthread_equal(pthread_self(), t));
    return 0;
}
