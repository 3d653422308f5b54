// Threads blocked in system calls that nothing turns into uthread waits (read on a pipe, poll,
// epoll_wait, accept) while main, which alone can wake them, must still run. Run on one
// kthread, each blocked thread holds a kthread until main writes, so the blocking reserve must
// stand in for them. Prints one line per check; the output must be the same under corral-run
// as plain.
#define _GNU_SOURCE
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define CHECK(name, cond) printf("%-52s %s\n", name, (cond) ? "ok" : "FAILED")

static int pipes[3][2];
static int listener;
static atomic_int results[4];

static void *reader(void *arg) {
    (void)arg;
    char c = 0;
    atomic_store(&results[0], read(pipes[0][0], &c, 1) == 1 && c == 'r');
    return NULL;
}

static void *poller(void *arg) {
    (void)arg;
    struct pollfd p = {.fd = pipes[1][0], .events = POLLIN};
    atomic_store(&results[1], poll(&p, 1, -1) == 1 && (p.revents & POLLIN));
    return NULL;
}

static void *epoller(void *arg) {
    (void)arg;
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = pipes[2][0]};
    epoll_ctl(ep, EPOLL_CTL_ADD, pipes[2][0], &ev);
    struct epoll_event got;
    atomic_store(&results[2], epoll_wait(ep, &got, 1, -1) == 1 && got.data.fd == pipes[2][0]);
    close(ep);
    return NULL;
}

static void *acceptor(void *arg) {
    (void)arg;
    int c = accept(listener, NULL, NULL);
    atomic_store(&results[3], c >= 0);
    if (c >= 0)
        close(c);
    return NULL;
}

int main(void) {
    for (int i = 0; i < 3; i++)
        if (pipe(pipes[i]) != 0)
            return 1;
    listener = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof addr;
    if (bind(listener, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(listener, 1) != 0 ||
        getsockname(listener, (struct sockaddr *)&addr, &len) != 0)
        return 1;

    void *(*bodies[4])(void *) = {reader, poller, epoller, acceptor};
    pthread_t threads[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&threads[i], NULL, bodies[i], NULL);
    // Give every thread time to block before waking any.
    usleep(100000);
    char c = 'r';
    for (int i = 0; i < 3; i++)
        if (write(pipes[i][1], &c, 1) != 1)
            return 1;
    int s = socket(AF_INET, SOCK_STREAM, 0);
    int connected = connect(s, (struct sockaddr *)&addr, sizeof addr) == 0;
    for (int i = 0; i < 4; i++)
        pthread_join(threads[i], NULL);
    close(s);
    CHECK("read on a pipe returns the byte written", results[0]);
    CHECK("poll sees the pipe readable", results[1]);
    CHECK("epoll_wait reports the pipe", results[2]);
    CHECK("accept takes the connection", connected && results[3]);
    return 0;
}
