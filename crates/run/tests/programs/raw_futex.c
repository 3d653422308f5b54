// Futexes used through syscall(SYS_futex, ...), as Rust's std and hand-written locks use them:
// every operation's result, and that a thread asleep in a futex wait leaves its CPU to the
// others (run with one kthread, a waiter that held it would never be woken). Prints one line
// per check; the output must be the same under corral-run as plain.
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define CHECK(name, cond) printf("%-52s %s\n", name, (cond) ? "ok" : "FAILED")

static long futex(_Atomic uint32_t *word, int op, uint32_t val, const struct timespec *timeout,
                  _Atomic uint32_t *word2, uint32_t val3) {
    return syscall(SYS_futex, word, op | FUTEX_PRIVATE_FLAG, val, timeout, word2, val3);
}

static long futex_val2(_Atomic uint32_t *word, int op, uint32_t val, long val2,
                       _Atomic uint32_t *word2, uint32_t val3) {
    return syscall(SYS_futex, word, op | FUTEX_PRIVATE_FLAG, val, val2, word2, val3);
}

static long long now_ns(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

// A lock on one word (0 free, 1 held, 2 held with waiters), the classic futex mutex.
static _Atomic uint32_t lock_word;
static void lock(void) {
    uint32_t c = 0;
    if (atomic_compare_exchange_strong(&lock_word, &c, 1))
        return;
    if (c != 2)
        c = atomic_exchange(&lock_word, 2);
    while (c != 0) {
        futex(&lock_word, FUTEX_WAIT, 2, NULL, NULL, 0);
        c = atomic_exchange(&lock_word, 2);
    }
}
static void unlock(void) {
    if (atomic_fetch_sub(&lock_word, 1) != 1) {
        atomic_store(&lock_word, 0);
        futex(&lock_word, FUTEX_WAKE, 1, NULL, NULL, 0);
    }
}

#define THREADS 8
#define ROUNDS 20000
static long counter;
static void *contend(void *arg) {
    (void)arg;
    for (int i = 0; i < ROUNDS; i++) {
        lock();
        long c = counter;
        if (i % 64 == 0)
            sched_yield();
        counter = c + 1;
        unlock();
    }
    return NULL;
}

// A waiter woken only by a thread that can run only if the waiter left it the CPU.
static _Atomic uint32_t gate;
static _Atomic int waiter_result = -1;
static void *gate_waiter(void *arg) {
    (void)arg;
    while (atomic_load(&gate) == 0)
        futex(&gate, FUTEX_WAIT, 0, NULL, NULL, 0);
    atomic_store(&waiter_result, 0);
    return NULL;
}

static _Atomic uint32_t bits;
static _Atomic int bit2_woken;
static void *bit2_waiter(void *arg) {
    (void)arg;
    while (atomic_load(&bits) == 0)
        futex(&bits, FUTEX_WAIT_BITSET, 0, NULL, NULL, 2);
    atomic_store(&bit2_woken, 1);
    return NULL;
}

int main(void) {
    // The wait leaves the CPU: main runs, opens the gate, and wakes the waiter.
    pthread_t t;
    pthread_create(&t, NULL, gate_waiter, NULL);
    usleep(20000);
    atomic_store(&gate, 1);
    futex(&gate, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
    pthread_join(t, NULL);
    CHECK("a futex waiter leaves the CPU and is woken", waiter_result == 0);

    pthread_t ts[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&ts[i], NULL, contend, NULL);
    for (int i = 0; i < THREADS; i++)
        pthread_join(ts[i], NULL);
    CHECK("a futex lock excludes under contention", counter == (long)THREADS * ROUNDS);

    _Atomic uint32_t w = 5;
    errno = 0;
    CHECK("FUTEX_WAIT on a changed value: EAGAIN",
          futex(&w, FUTEX_WAIT, 4, NULL, NULL, 0) == -1 && errno == EAGAIN);

    struct timespec rel = {0, 20 * 1000000};
    long long start = now_ns(CLOCK_MONOTONIC);
    errno = 0;
    long r = futex(&w, FUTEX_WAIT, 5, &rel, NULL, 0);
    long long waited = now_ns(CLOCK_MONOTONIC) - start;
    CHECK("FUTEX_WAIT relative timeout: ETIMEDOUT after it",
          r == -1 && errno == ETIMEDOUT && waited >= 20 * 1000000LL);

    long long at = now_ns(CLOCK_MONOTONIC) + 20 * 1000000LL;
    struct timespec abs_mono = {at / 1000000000LL, at % 1000000000LL};
    errno = 0;
    r = futex(&w, FUTEX_WAIT_BITSET, 5, &abs_mono, NULL, FUTEX_BITSET_MATCH_ANY);
    CHECK("FUTEX_WAIT_BITSET monotonic deadline: ETIMEDOUT",
          r == -1 && errno == ETIMEDOUT && now_ns(CLOCK_MONOTONIC) >= at);

    long long rt = now_ns(CLOCK_REALTIME) + 20 * 1000000LL;
    struct timespec abs_real = {rt / 1000000000LL, rt % 1000000000LL};
    errno = 0;
    r = futex(&w, FUTEX_WAIT_BITSET | FUTEX_CLOCK_REALTIME, 5, &abs_real, NULL,
              FUTEX_BITSET_MATCH_ANY);
    CHECK("FUTEX_WAIT_BITSET realtime deadline: ETIMEDOUT",
          r == -1 && errno == ETIMEDOUT && now_ns(CLOCK_REALTIME) >= rt);

    struct timespec bad = {0, 1000000000};
    errno = 0;
    CHECK("a timeout with 10^9 ns: EINVAL",
          futex(&w, FUTEX_WAIT, 5, &bad, NULL, 0) == -1 && errno == EINVAL);
    errno = 0;
    CHECK("FUTEX_WAIT_BITSET with an empty bitset: EINVAL",
          futex(&w, FUTEX_WAIT_BITSET, 5, NULL, NULL, 0) == -1 && errno == EINVAL);
    errno = 0;
    CHECK("a misaligned word: EINVAL",
          syscall(SYS_futex, (char *)&w + 1, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0) == -1 &&
              errno == EINVAL);
    CHECK("FUTEX_WAKE with no waiter wakes none", futex(&w, FUTEX_WAKE, 1, NULL, NULL, 0) == 0);

    // A wake whose bitset misses the waiter's leaves it asleep; one that shares a bit wakes it.
    pthread_create(&t, NULL, bit2_waiter, NULL);
    usleep(20000);
    atomic_store(&bits, 1);
    long missed = futex(&bits, FUTEX_WAKE_BITSET, INT_MAX, NULL, NULL, 1);
    usleep(20000);
    int asleep = atomic_load(&bit2_woken) == 0;
    long hit = futex(&bits, FUTEX_WAKE_BITSET, INT_MAX, NULL, NULL, 6);
    pthread_join(t, NULL);
    CHECK("FUTEX_WAKE_BITSET wakes only matching bitsets",
          missed == 0 && asleep && hit == 1 && bit2_woken == 1);

    _Atomic uint32_t a = 1, b = 7;
    errno = 0;
    CHECK("FUTEX_CMP_REQUEUE with a changed value: EAGAIN",
          futex_val2(&a, FUTEX_CMP_REQUEUE, 1, 1, &b, 2) == -1 && errno == EAGAIN);
    CHECK("FUTEX_CMP_REQUEUE with no waiters: 0",
          futex_val2(&a, FUTEX_CMP_REQUEUE, 1, 1, &b, 1) == 0);
    // FUTEX_OP(FUTEX_OP_ADD, 3, FUTEX_OP_CMP_GE, 7): b += 3, compare the old 7 >= 7.
    uint32_t op = (1u << 28) | (5u << 24) | (3u << 12) | 7u;
    CHECK("FUTEX_WAKE_OP applies its operation",
          futex_val2(&a, FUTEX_WAKE_OP, 1, 1, &b, op) == 0 && atomic_load(&b) == 10);
    return 0;
}
