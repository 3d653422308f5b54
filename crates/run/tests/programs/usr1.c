/* A program with its own SIGUSR1 handlers (as xz has for progress reports): each signal it
 * sends itself with kill() runs its handler exactly once, sigaction() and signal() report the
 * handlers it installed, SA_RESETHAND and SIG_IGN behave as POSIX says. Worker threads keep
 * the CPU busy until stdin ends, so that a runtime preempting this one (with the same signal)
 * has something to take the core from meanwhile. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define KILLS 100

static atomic_int info_runs, plain_runs, reset_runs, foreign;
static atomic_int stop;

static void on_info(int sig, siginfo_t *info, void *ctx) {
    (void)ctx;
    if (sig != SIGUSR1 || info->si_code != SI_USER || info->si_pid != getpid())
        atomic_fetch_add(&foreign, 1);
    atomic_fetch_add(&info_runs, 1);
}

static void on_plain(int sig) {
    if (sig != SIGUSR1)
        atomic_fetch_add(&foreign, 1);
    atomic_fetch_add(&plain_runs, 1);
}

static void on_reset(int sig) {
    (void)sig;
    atomic_fetch_add(&reset_runs, 1);
}

static void *spin(void *arg) {
    volatile unsigned long x = (unsigned long)arg;
    while (!atomic_load(&stop))
        for (int i = 0; i < 100000; i++)
            x = x * 6364136223846793005UL + 1;
    return NULL;
}

/* Sends SIGUSR1 to the process and waits until `runs` reaches `want` (or gives up). */
static void kill_and_wait(atomic_int *runs, int want) {
    kill(getpid(), SIGUSR1);
    for (long i = 0; i < 100000000L && atomic_load(runs) < want; i++)
        sched_yield();
}

int main(void) {
    pthread_t workers[2];
    for (long i = 0; i < 2; i++)
        pthread_create(&workers[i], NULL, spin, (void *)i);

    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_sigaction = on_info;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGUSR1, &sa, &old);
    printf("initial disposition default %d\n", old.sa_handler == SIG_DFL);
    sigaction(SIGUSR1, NULL, &old);
    printf("sigaction reports its handler %d\n",
           old.sa_sigaction == on_info && (old.sa_flags & SA_SIGINFO) != 0);
    for (int i = 1; i <= KILLS; i++)
        kill_and_wait(&info_runs, i);

    void (*previous)(int) = signal(SIGUSR1, on_plain);
    printf("signal returns the previous handler %d\n", previous == (void (*)(int))on_info);
    for (int i = 1; i <= KILLS; i++)
        kill_and_wait(&plain_runs, i);

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_reset;
    sa.sa_flags = SA_RESETHAND;
    sigaction(SIGUSR1, &sa, NULL);
    kill_and_wait(&reset_runs, 1);
    sigaction(SIGUSR1, NULL, &old);
    printf("SA_RESETHAND restores the default %d\n", old.sa_handler == SIG_DFL);

    /* Ignored from here on (to the end: it may be delivered after kill returns). */
    signal(SIGUSR1, SIG_IGN);
    kill(getpid(), SIGUSR1);

    /* Busy until stdin ends. */
    char buf[64];
    while (read(0, buf, sizeof buf) > 0)
        ;
    atomic_store(&stop, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(workers[i], NULL);
    printf("info handler runs %d\n", atomic_load(&info_runs));
    printf("plain handler runs %d\n", atomic_load(&plain_runs));
    printf("reset handler runs %d\n", atomic_load(&reset_runs));
    printf("signals not from kill(getpid()) %d\n", atomic_load(&foreign));
    return 0;
}
