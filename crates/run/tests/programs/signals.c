/* Signals between threads, each path a mode; each prints what it saw, the same plain and
 * under corral-run, and exits 1 with a message on the first thing that is wrong. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        if (!(cond)) {                                                          \
            fprintf(stderr, "FAILED line %d: ", __LINE__);                      \
            fprintf(stderr, __VA_ARGS__);                                       \
            fprintf(stderr, "\n");                                              \
            exit(1);                                                            \
        }                                                                       \
    } while (0)

static pthread_t main_thread;
static volatile sig_atomic_t handled_sig;
static pthread_t handled_on;

static void on_signal(int sig) {
    handled_sig = sig;
    handled_on = pthread_self();
}

static void install(int sig) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(sig, &sa, NULL) == 0, "sigaction %d", sig);
}

static void mask(int how, int sig, sigset_t *old) {
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, sig);
    CHECK(pthread_sigmask(how, &s, old) == 0, "pthread_sigmask");
}

/* lbzip2's way: every thread blocks SIGUSR2, another thread sends it to the process with
 * kill, and main takes it in sigsuspend with it unblocked. */
static void *send_usr2(void *arg) {
    (void)arg;
    usleep(20000);
    CHECK(kill(getpid(), SIGUSR2) == 0, "kill");
    return NULL;
}

static void suspend_mode(void) {
    sigset_t old;
    install(SIGUSR2);
    mask(SIG_BLOCK, SIGUSR2, &old);
    pthread_t t;
    pthread_create(&t, NULL, send_usr2, NULL);
    while (!handled_sig) {
        int rc = sigsuspend(&old);
        CHECK(rc == -1 && errno == EINTR, "sigsuspend returned %d, errno %d", rc, errno);
    }
    CHECK(pthread_equal(handled_on, main_thread), "the handler ran on another thread");
    sigset_t now;
    pthread_sigmask(SIG_BLOCK, NULL, &now);
    CHECK(sigismember(&now, SIGUSR2), "sigsuspend did not put the mask back");
    pthread_join(t, NULL);
    printf("sigsuspend: main took the SIGUSR2 a thread sent the process\n");
}

/* pbzip2's way: a thread waits in sigwait, main ends it with pthread_kill. With one kthread,
 * main runs meanwhile only if the waiting thread gave its kthread back. */
static void *waiter(void *arg) {
    sigset_t *set = arg;
    int sig = 0;
    int rc = sigwait(set, &sig);
    CHECK(rc == 0, "sigwait returned %d", rc);
    return (void *)(long)sig;
}

static void sigwait_mode(void) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    pthread_t t;
    pthread_create(&t, NULL, waiter, &set);
    usleep(20000);
    CHECK(pthread_kill(t, SIGUSR1) == 0, "pthread_kill");
    void *got;
    pthread_join(t, &got);
    CHECK((long)got == SIGUSR1, "sigwait took %ld", (long)got);
    printf("sigwait: the waiting thread took main's SIGUSR1\n");

    siginfo_t info;
    struct timespec short_wait = {0, 20 * 1000 * 1000};
    int rc = sigtimedwait(&set, &info, &short_wait);
    CHECK(rc == -1 && errno == EAGAIN, "sigtimedwait returned %d, errno %d", rc, errno);
    union sigval value = {.sival_int = 42};
    CHECK(sigqueue(getpid(), SIGTERM, value) == 0, "sigqueue");
    rc = sigwaitinfo(&set, &info);
    CHECK(rc == SIGTERM, "sigwaitinfo took %d", rc);
    CHECK(info.si_code == SI_QUEUE && info.si_value.sival_int == 42 && info.si_pid == getpid(),
          "sigwaitinfo's siginfo: code %d value %d pid %d", info.si_code,
          info.si_value.sival_int, info.si_pid);
    printf("sigtimedwait: timed out; sigwaitinfo: took a queued SIGTERM with its value\n");
    CHECK(pthread_kill(pthread_self(), 0) == 0, "pthread_kill of 0");
    CHECK(pthread_kill(pthread_self(), 999) == EINVAL, "pthread_kill of 999");
}

/* Pending while blocked, delivered when unblocked, before the call that unblocks returns. */
static void pending_mode(void) {
    install(SIGUSR2);
    sigset_t old, pending;
    mask(SIG_BLOCK, SIGUSR2, &old);
    CHECK(raise(SIGUSR2) == 0, "raise");
    CHECK(!handled_sig, "delivered while blocked");
    sigpending(&pending);
    CHECK(sigismember(&pending, SIGUSR2), "raised and blocked, but not pending");
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    CHECK(handled_sig == SIGUSR2, "not delivered when unblocked");
    handled_sig = 0;
    CHECK(raise(SIGUSR2) == 0, "raise");
    CHECK(handled_sig == SIGUSR2, "raise returned before the handler ran");
    handled_sig = 0;
    mask(SIG_BLOCK, SIGUSR2, NULL);
    CHECK(kill(getpid(), SIGUSR2) == 0, "kill");
    sigpending(&pending);
    CHECK(!handled_sig && sigismember(&pending, SIGUSR2), "a blocked kill not pending");
    mask(SIG_UNBLOCK, SIGUSR2, NULL);
    CHECK(handled_sig == SIGUSR2 && pthread_equal(handled_on, main_thread),
          "the process's pending signal not taken when unblocked");
    sigpending(&pending);
    CHECK(!sigismember(&pending, SIGUSR2), "still pending once taken");
    printf("pending: blocked signals wait, and run as their thread unblocks them\n");
}

/* Only a thread that computes without a pause has the signal unblocked: its handler runs on
 * it, interrupting it. */
static atomic_int computing;

static void *compute(void *arg) {
    (void)arg;
    sigset_t none;
    sigemptyset(&none);
    pthread_sigmask(SIG_SETMASK, &none, NULL);
    atomic_store(&computing, 1);
    volatile unsigned long n = 0;
    while (!handled_sig)
        n++;
    return NULL;
}

static void interrupt_mode(void) {
    install(SIGUSR2);
    mask(SIG_BLOCK, SIGUSR2, NULL);
    pthread_t t;
    pthread_create(&t, NULL, compute, NULL);
    while (!atomic_load(&computing))
        usleep(1000);
    CHECK(kill(getpid(), SIGUSR2) == 0, "kill");
    pthread_join(t, NULL);
    CHECK(pthread_equal(handled_on, t), "the handler ran on another thread");
    printf("interrupt: the computing thread ran the handler\n");
}

/* SIGALRM's handler ends sleeps early. */
static void sleep_mode(void) {
    install(SIGALRM);
    alarm(1);
    unsigned left = sleep(30);
    CHECK(handled_sig == SIGALRM && left > 0 && left < 30, "sleep: left %u, signal %d", left,
          (int)handled_sig);
    handled_sig = 0;
    struct itimerval timer = {{0, 0}, {0, 200 * 1000}};
    setitimer(ITIMER_REAL, &timer, NULL);
    struct timespec req = {30, 0}, rem = {0, 0};
    int rc = nanosleep(&req, &rem);
    CHECK(rc == -1 && errno == EINTR && rem.tv_sec > 20 && handled_sig == SIGALRM,
          "nanosleep: %d errno %d, %ld s left", rc, errno, (long)rem.tv_sec);
    printf("sleep: SIGALRM ended sleep and nanosleep early\n");
}

/* A signalfd reads what the process was sent. */
static void signalfd_mode(void) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    int fd = signalfd(-1, &set, SFD_CLOEXEC);
    CHECK(fd >= 0, "signalfd: %s", strerror(errno));
    CHECK(kill(getpid(), SIGUSR2) == 0, "kill");
    struct signalfd_siginfo si;
    CHECK(read(fd, &si, sizeof si) == sizeof si, "read");
    CHECK(si.ssi_signo == SIGUSR2 && si.ssi_pid == (unsigned)getpid(), "signalfd read %u from %u",
          si.ssi_signo, si.ssi_pid);
    printf("signalfd: read the SIGUSR2 the process sent itself\n");
}

/* Children start with the program's mask. */
static void show_child_mask(const char *how) {
    printf("%s: ", how);
    fflush(stdout);
}

static void children_mode(void) {
    char *grep[] = {"grep", "SigBlk", "/proc/self/status", NULL};
    for (int round = 0; round < 2; round++) {
        if (round == 1)
            mask(SIG_BLOCK, SIGUSR2, NULL);
        show_child_mask("system");
        CHECK(system("grep SigBlk /proc/self/status") == 0, "system");
        show_child_mask("posix_spawn");
        pid_t pid;
        CHECK(posix_spawn(&pid, "/bin/grep", NULL, NULL, grep, environ) == 0, "posix_spawn");
        int status;
        CHECK(waitpid(pid, &status, 0) == pid && status == 0, "posix_spawn's child");
        FILE *p = popen("grep SigBlk /proc/self/status", "r");
        CHECK(p != NULL, "popen");
        char line[128] = "";
        CHECK(fgets(line, sizeof line, p) != NULL, "popen's output");
        CHECK(pclose(p) == 0, "pclose");
        printf("popen: %s", line);
    }
    CHECK(system(NULL) != 0, "system(NULL): no shell");
}

/* For a signal from another process: report, then wait. SIGHUP's handler reports itself (it
 * may run before the wait starts, as under Linux), and may interrupt the wait for SIGTERM,
 * which main then takes. */
static void on_hup(int sig) {
    static const char line[] = "SIGHUP handled\n";
    handled_sig = sig;
    if (write(1, line, sizeof line - 1) < 0)
        _exit(1);
}

static void external_mode(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_hup;
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGHUP, &sa, NULL) == 0, "sigaction");
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &term, NULL);
    printf("ready\n");
    fflush(stdout);
    siginfo_t info;
    int rc;
    while ((rc = sigwaitinfo(&term, &info)) == -1)
        CHECK(errno == EINTR && handled_sig == SIGHUP, "sigwaitinfo: errno %d", errno);
    CHECK(rc == SIGTERM && info.si_code == SI_USER, "sigwaitinfo took %d (code %d)", rc,
          info.si_code);
    printf("SIGTERM taken\n");
}

static void *sleep_long(void *arg) {
    (void)arg;
    sleep(60);
    return NULL;
}

/* For a signal from another process with its default action: threads sleep until it ends the
 * process. */
static void default_mode(void) {
    /* Whatever was inherited (a shell's background job ignores SIGINT, nohup SIGHUP). */
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    pthread_t t;
    pthread_create(&t, NULL, sleep_long, NULL);
    printf("ready\n");
    fflush(stdout);
    pause();
    CHECK(0, "pause returned");
}

int main(int argc, char **argv) {
    main_thread = pthread_self();
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "suspend"))
        suspend_mode();
    else if (!strcmp(mode, "sigwait"))
        sigwait_mode();
    else if (!strcmp(mode, "pending"))
        pending_mode();
    else if (!strcmp(mode, "interrupt"))
        interrupt_mode();
    else if (!strcmp(mode, "sleep"))
        sleep_mode();
    else if (!strcmp(mode, "signalfd"))
        signalfd_mode();
    else if (!strcmp(mode, "children"))
        children_mode();
    else if (!strcmp(mode, "external"))
        external_mode();
    else if (!strcmp(mode, "default"))
        default_mode();
    else {
        fprintf(stderr, "usage: signals MODE\n");
        return 2;
    }
    return 0;
}
