/*
 * pthreads-peer: measures basic thread operations on native POSIX threads
 * so they can be compared with Corral and Go by the benchmark runner.
 *
 * Output: one JSON object per op on stdout, e.g.
 *   {"peer":"pthreads","op":"yield","unit":"ns_per_op","samples":[512.3,498.1]}
 * Diagnostics go to stderr. See ../README.md.
 *
 * Build: gcc -O2 -pthread -o pthreads-peer peer.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int opt_reps = 11;
static double opt_scale = 1.0;
static int opt_cpu0 = 0;
static int opt_cpu1 = 1;

static void die(const char *fmt, ...)
{
    va_list ap;
    fputs("pthreads-peer: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

static void check(int err, const char *what)
{
    if (err != 0)
        die("%s: %s", what, strerror(err));
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void spin_ns(int64_t ns)
{
    int64_t end = now_ns() + ns;
    while (now_ns() < end) {
    }
}

/* round to nearest for non-negative x (avoids needing -lm) */
static long round_pos(double x)
{
    return (long)(x + 0.5);
}

/* round(base * scale), at least 1 */
static long scaled(double base)
{
    long n = round_pos(base * opt_scale);
    return n < 1 ? 1 : n;
}

/* Pin the calling thread to cpu a (and cpu b if b >= 0). Threads created
 * afterwards by this thread inherit the mask. */
static void pin_self(int a, int b)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(a, &set);
    if (b >= 0)
        CPU_SET(b, &set);
    check(pthread_setaffinity_np(pthread_self(), sizeof set, &set),
          "pthread_setaffinity_np");
}

static pthread_t spawn(void *(*fn)(void *), void *arg)
{
    pthread_t t;
    check(pthread_create(&t, NULL, fn, arg), "pthread_create");
    return t;
}

static void join(pthread_t t, void **ret)
{
    check(pthread_join(t, ret), "pthread_join");
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, long n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* ---- yield ------------------------------------------------------------ */
/* Two threads pinned to cpu0 each call sched_yield K times. */

static pthread_barrier_t yield_barrier;
static long yield_k;

static void *yield_thread(void *arg)
{
    (void)arg;
    pthread_barrier_wait(&yield_barrier);
    for (long i = 0; i < yield_k; i++)
        sched_yield();
    return NULL;
}

static double op_yield(long k)
{
    pin_self(opt_cpu0, -1);
    yield_k = k;
    check(pthread_barrier_init(&yield_barrier, NULL, 3), "pthread_barrier_init");
    pthread_t a = spawn(yield_thread, NULL);
    pthread_t b = spawn(yield_thread, NULL);
    pthread_barrier_wait(&yield_barrier);
    int64_t t0 = now_ns();
    join(a, NULL);
    join(b, NULL);
    int64_t el = now_ns() - t0;
    pthread_barrier_destroy(&yield_barrier);
    return (double)el / (double)(2 * k);
}

/* ---- spawn_join ------------------------------------------------------- */
/* On cpu0: create a thread returning a value, join it, check the value. */

static void *return_arg_plus_one(void *arg)
{
    return (void *)((uintptr_t)arg + 1);
}

static double op_spawn_join(long k)
{
    pin_self(opt_cpu0, -1);
    int64_t t0 = now_ns();
    for (long i = 0; i < k; i++) {
        void *ret;
        pthread_t t = spawn(return_arg_plus_one, (void *)(uintptr_t)i);
        join(t, &ret);
        if ((uintptr_t)ret != (uintptr_t)i + 1)
            die("spawn_join: got %lu want %ld", (unsigned long)(uintptr_t)ret, i + 1);
    }
    return (double)(now_ns() - t0) / (double)k;
}

/* ---- mutex ------------------------------------------------------------ */
/* Uncontended lock/unlock of a default pthread mutex on one thread. */

static pthread_mutex_t bench_mutex = PTHREAD_MUTEX_INITIALIZER;
static uint64_t mutex_counter;

static double op_mutex(long k)
{
    pin_self(opt_cpu0, -1);
    uint64_t before = mutex_counter;
    int64_t t0 = now_ns();
    for (long i = 0; i < k; i++) {
        pthread_mutex_lock(&bench_mutex);
        mutex_counter++;
        pthread_mutex_unlock(&bench_mutex);
    }
    int64_t el = now_ns() - t0;
    if (mutex_counter - before != (uint64_t)k)
        die("mutex: counter %lu want %ld", (unsigned long)(mutex_counter - before), k);
    return (double)el / (double)k;
}

/* ---- condvar ---------------------------------------------------------- */
/* Ping-pong on cpu0 through one mutex, one condvar and a turn flag. */

static pthread_mutex_t cv_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv_cond = PTHREAD_COND_INITIALIZER;
static int cv_turn;
static long cv_rounds; /* hand-offs per player */
static pthread_barrier_t cv_barrier;

static void *cv_player(void *arg)
{
    int me = (int)(uintptr_t)arg, other = 1 - me;
    pthread_barrier_wait(&cv_barrier);
    for (long i = 0; i < cv_rounds; i++) {
        pthread_mutex_lock(&cv_mutex);
        while (cv_turn != me)
            pthread_cond_wait(&cv_cond, &cv_mutex);
        cv_turn = other;
        pthread_cond_signal(&cv_cond);
        pthread_mutex_unlock(&cv_mutex);
    }
    return NULL;
}

static double op_condvar(long n)
{
    if (n % 2)
        n++;
    pin_self(opt_cpu0, -1);
    cv_turn = 0;
    cv_rounds = n / 2;
    check(pthread_barrier_init(&cv_barrier, NULL, 3), "pthread_barrier_init");
    pthread_t a = spawn(cv_player, (void *)(uintptr_t)0);
    pthread_t b = spawn(cv_player, (void *)(uintptr_t)1);
    pthread_barrier_wait(&cv_barrier);
    int64_t t0 = now_ns();
    join(a, NULL);
    join(b, NULL);
    int64_t el = now_ns() - t0;
    pthread_barrier_destroy(&cv_barrier);
    return (double)el / (double)n;
}

/* ---- wake_latency ----------------------------------------------------- */
/* Waiter pinned to cpu1 blocks on a condvar; waker pinned to cpu0 stamps t0,
 * signals, then busy-spins (>= 50us and until the waiter has reported) so
 * the waker's CPU never runs the waiter. The waiter stamps t1 as soon as
 * pthread_cond_wait returns. The waker spins 200us between rounds so the
 * waiter is blocked and its CPU idle. Result: median latency in ns. */

static pthread_mutex_t wl_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wl_cond = PTHREAD_COND_INITIALIZER;
static long wl_gen;     /* protected by wl_mutex */
static int wl_waiting;  /* protected by wl_mutex: waiter is inside cond_wait */
static int wl_stop;     /* protected by wl_mutex */
static int64_t wl_t0;   /* protected by wl_mutex */
static _Atomic int64_t wl_result; /* latency, -1 = not yet published */

static void *wl_waiter(void *arg)
{
    (void)arg;
    pin_self(opt_cpu1, -1);
    long seen = 0;
    pthread_mutex_lock(&wl_mutex);
    for (;;) {
        while (wl_gen == seen && !wl_stop) {
            wl_waiting = 1;
            pthread_cond_wait(&wl_cond, &wl_mutex);
        }
        int64_t t1 = now_ns();
        wl_waiting = 0;
        if (wl_stop)
            break;
        seen = wl_gen;
        atomic_store_explicit(&wl_result, t1 - wl_t0, memory_order_release);
    }
    pthread_mutex_unlock(&wl_mutex);
    return NULL;
}

static double op_wake_latency(long rounds)
{
    pin_self(opt_cpu0, -1);
    double *lat = malloc(sizeof(double) * (size_t)rounds);
    if (!lat)
        die("out of memory");
    wl_gen = 0;
    wl_stop = 0;
    wl_waiting = 0;
    pthread_t w = spawn(wl_waiter, NULL);
    for (long r = 0; r < rounds; r++) {
        atomic_store(&wl_result, -1);
        spin_ns(200000);
        for (;;) {
            pthread_mutex_lock(&wl_mutex);
            if (wl_waiting)
                break;
            pthread_mutex_unlock(&wl_mutex); /* waiter not blocked yet */
            spin_ns(10000);
        }
        wl_t0 = now_ns();
        wl_gen++;
        pthread_cond_signal(&wl_cond);
        pthread_mutex_unlock(&wl_mutex);
        int64_t spin_until = now_ns() + 50000;
        int64_t v;
        while ((v = atomic_load_explicit(&wl_result, memory_order_acquire)) < 0 ||
               now_ns() < spin_until) {
        }
        lat[r] = (double)v;
    }
    pthread_mutex_lock(&wl_mutex);
    wl_stop = 1;
    pthread_cond_signal(&wl_cond);
    pthread_mutex_unlock(&wl_mutex);
    join(w, NULL);
    double m = median(lat, rounds);
    free(lat);
    return m;
}

/* ---- spawn_throughput ------------------------------------------------- */
/* Threads may run on cpu0 and cpu1: create batches of 1000 threads that each
 * increment an atomic counter, join the batch. Result: ns per thread. */

#define BATCH 1000
static atomic_long st_counter;

static void *st_thread(void *arg)
{
    (void)arg;
    atomic_fetch_add_explicit(&st_counter, 1, memory_order_relaxed);
    return NULL;
}

static double op_spawn_throughput(long batches)
{
    static pthread_t ts[BATCH];
    pin_self(opt_cpu0, opt_cpu1);
    atomic_store(&st_counter, 0);
    int64_t t0 = now_ns();
    for (long b = 0; b < batches; b++) {
        for (int i = 0; i < BATCH; i++)
            ts[i] = spawn(st_thread, NULL);
        for (int i = 0; i < BATCH; i++)
            join(ts[i], NULL);
    }
    int64_t el = now_ns() - t0;
    long got = atomic_load(&st_counter);
    if (got != batches * BATCH)
        die("spawn_throughput: counter %ld want %ld", got, batches * BATCH);
    return (double)el / (double)(batches * BATCH);
}

/* ---- driver ----------------------------------------------------------- */

struct op {
    const char *name;
    double (*run)(long);
    long n;        /* per-repetition size */
    long warm_min; /* minimum warm-up size */
};

static struct op ops[6];

static void init_ops(void)
{
    long wl = round_pos(200.0 * (opt_scale > 0.05 ? opt_scale : 0.05));
    if (wl < 10)
        wl = 10;
    long st = round_pos(50000.0 * opt_scale / BATCH);
    if (st < 1)
        st = 1;
    struct op o[6] = {
        {"yield", op_yield, scaled(1000000), 1},
        {"spawn_join", op_spawn_join, scaled(20000), 1},
        {"mutex", op_mutex, scaled(10000000), 1},
        {"condvar", op_condvar, scaled(100000), 2},
        {"wake_latency", op_wake_latency, wl, 10},
        {"spawn_throughput", op_spawn_throughput, st, 1},
    };
    memcpy(ops, o, sizeof o);
}

static struct op *find_op(const char *name, size_t len)
{
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (strlen(ops[i].name) == len && strncmp(ops[i].name, name, len) == 0)
            return &ops[i];
    die("unknown op '%.*s' (known: yield,spawn_join,mutex,condvar,wake_latency,"
        "spawn_throughput)", (int)len, name);
    return NULL;
}

static void run_op(const struct op *op)
{
    double *samples = malloc(sizeof(double) * (size_t)opt_reps);
    if (!samples)
        die("out of memory");
    long warm = op->n / 10;
    if (warm < op->warm_min)
        warm = op->warm_min;
    op->run(warm);
    for (int r = 0; r < opt_reps; r++)
        samples[r] = op->run(op->n);
    printf("{\"peer\":\"pthreads\",\"op\":\"%s\",\"unit\":\"ns_per_op\",\"samples\":[",
           op->name);
    for (int r = 0; r < opt_reps; r++)
        printf("%s%.3f", r ? "," : "", samples[r]);
    printf("]}\n");
    fflush(stdout);
    free(samples);
}

static void usage(void)
{
    die("usage: pthreads-peer [--reps N] [--scale F] [--cpu0 N] [--cpu1 M] "
        "[--ops a,b,c]");
}

static long parse_long(const char *flag, const char *s)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end)
        die("bad value for %s: '%s'", flag, s);
    return v;
}

int main(int argc, char **argv)
{
    const char *ops_arg = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = NULL;
        char name[32];
        if (a[0] != '-')
            usage();
        while (*a == '-')
            a++;
        const char *eq = strchr(a, '=');
        size_t nlen = eq ? (size_t)(eq - a) : strlen(a);
        if (nlen >= sizeof name)
            usage();
        memcpy(name, a, nlen);
        name[nlen] = 0;
        if (eq)
            val = eq + 1;
        else if (i + 1 < argc)
            val = argv[++i];
        else
            die("missing value for --%s", name);
        if (!strcmp(name, "reps")) {
            opt_reps = (int)parse_long("--reps", val);
        } else if (!strcmp(name, "scale")) {
            char *end;
            opt_scale = strtod(val, &end);
            if (end == val || *end)
                die("bad value for --scale: '%s'", val);
        } else if (!strcmp(name, "cpu0")) {
            opt_cpu0 = (int)parse_long("--cpu0", val);
        } else if (!strcmp(name, "cpu1")) {
            opt_cpu1 = (int)parse_long("--cpu1", val);
        } else if (!strcmp(name, "ops")) {
            ops_arg = val;
        } else {
            die("unknown flag --%s", name);
        }
    }
    if (opt_reps < 1)
        die("--reps must be >= 1");
    if (!(opt_scale > 0))
        die("--scale must be > 0");
    if (opt_cpu0 < 0 || opt_cpu0 >= CPU_SETSIZE || opt_cpu1 < 0 || opt_cpu1 >= CPU_SETSIZE)
        die("cpu out of range");
    init_ops();

    /* Validate the op list and CPUs before running anything. */
    const struct op *sel[64];
    int nsel = 0;
    if (!ops_arg || !*ops_arg) {
        for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
            sel[nsel++] = &ops[i];
    } else {
        const char *p = ops_arg;
        for (;;) {
            const char *c = strchr(p, ',');
            size_t len = c ? (size_t)(c - p) : strlen(p);
            if (nsel == 64)
                die("too many ops");
            sel[nsel++] = find_op(p, len);
            if (!c)
                break;
            p = c + 1;
        }
    }
    pin_self(opt_cpu0, opt_cpu1);

    /* glibc (>= 2.34) lets pthread_mutex_lock skip the atomic instruction
     * while the process has never created a thread. Create one up front so
     * every op measures the normal multi-threaded path regardless of order. */
    join(spawn(return_arg_plus_one, NULL), NULL);

    for (int i = 0; i < nsel; i++)
        run_op(sel[i]);
    return 0;
}
