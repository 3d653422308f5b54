/*
 * Exercises the Corral C API's TCP calls from C over the runtime's loopback (standalone, no
 * iokerneld): an echo, a transfer checked end to end, a refused dial, and the argument checks.
 * Exits nonzero if any check fails; the last line of output is "N passed, M failed". Built and
 * run by tests/c_programs.rs.
 */
#define _POSIX_C_SOURCE 200809L

#include "corral.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int passed;
static int failed;
static const char *volatile current_test = "(startup)";

#define WATCHDOG_SECONDS 60
/* The runtime's address, set in the environment before corral_run. */
#define IP_TEXT "10.79.0.2"
#define IP ((10u << 24) | (79u << 16) | 2u)

static void on_watchdog(int sig) {
    (void)sig;
    static const char prefix[] = "FAIL timed out in ";
    ssize_t ignored = write(STDOUT_FILENO, prefix, sizeof prefix - 1);
    ignored = write(STDOUT_FILENO, current_test, strlen(current_test));
    ignored = write(STDOUT_FILENO, "\n", 1);
    (void)ignored;
    _exit(2);
}

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

/* Writes all of buf, or returns the error. */
static ptrdiff_t write_all(corral_tcp_t *tcp, const uint8_t *buf, size_t len) {
    size_t done = 0;
    while (done < len) {
        ptrdiff_t n = corral_tcp_write(tcp, buf + done, len - done);
        if (n <= 0) {
            return n < 0 ? n : -EIO;
        }
        done += (size_t)n;
    }
    return (ptrdiff_t)done;
}

/* Reads exactly len bytes, or returns what ended the stream early (0, or an error). */
static ptrdiff_t read_exact(corral_tcp_t *tcp, uint8_t *buf, size_t len) {
    size_t done = 0;
    while (done < len) {
        ptrdiff_t n = corral_tcp_read(tcp, buf + done, len - done);
        if (n <= 0) {
            return n;
        }
        done += (size_t)n;
    }
    return (ptrdiff_t)done;
}

/* Serves one connection: echoes everything until the peer shuts down its side, then closes. */
static void *echo_one(void *arg) {
    corral_tcp_listener_t *listener = arg;
    corral_tcp_t *conn = NULL;
    if (corral_tcp_accept(listener, &conn, NULL) != 0) {
        return (void *)(intptr_t)-1;
    }
    uint8_t buf[4096];
    intptr_t echoed = 0;
    for (;;) {
        ptrdiff_t n = corral_tcp_read(conn, buf, sizeof buf);
        if (n == 0) {
            break;
        }
        if (n < 0 || write_all(conn, buf, (size_t)n) != n) {
            echoed = -1;
            break;
        }
        echoed += n;
    }
    corral_tcp_close(conn);
    return (void *)echoed;
}

static int test_echo(void) {
    struct corral_sockaddr local = {.ip = IP, .port = 7007};
    corral_tcp_listener_t *listener = NULL;
    CHECK(corral_tcp_listen(&local, &listener) == 0, "listen");
    corral_tcp_listener_t *again = NULL;
    CHECK(corral_tcp_listen(&local, &again) == -EADDRINUSE, "second listen on the same port");
    struct corral_sockaddr bound;
    CHECK(corral_tcp_listener_local_addr(listener, &bound) == 0, "listener address");
    CHECK(bound.ip == IP && bound.port == 7007, "listener at %08x:%u", bound.ip, bound.port);

    corral_thread_t *server = NULL;
    CHECK(corral_spawn(&server, echo_one, listener) == 0, "spawn the server");
    corral_tcp_t *client = NULL;
    CHECK(corral_tcp_dial(&local, 0, &client) == 0, "dial");
    CHECK(corral_tcp_set_nodelay(client, 1) == 0, "nodelay");
    struct corral_sockaddr me, peer;
    CHECK(corral_tcp_local_addr(client, &me) == 0, "local address");
    CHECK(corral_tcp_peer_addr(client, &peer) == 0, "peer address");
    CHECK(me.ip == IP && me.port != 0 && me.port != 7007, "local %08x:%u", me.ip, me.port);
    CHECK(peer.ip == IP && peer.port == 7007, "peer %08x:%u", peer.ip, peer.port);

    CHECK(corral_tcp_write(client, "hello", 5) == 5, "write");
    uint8_t buf[64];
    CHECK(read_exact(client, buf, 5) == 5 && memcmp(buf, "hello", 5) == 0, "echo of hello");

    /* A gather write: three buffers, one of them empty, come back as one run of bytes. */
    struct corral_iovec iov[3] = {
        {.base = "scatter-", .len = 8},
        {.base = NULL, .len = 0},
        {.base = "gather", .len = 6},
    };
    ptrdiff_t sent = 0;
    while (sent < 14) {
        /* Advance past what a short write took (it may stop inside any buffer). */
        struct corral_iovec rest[3];
        int count = 0;
        ptrdiff_t skip = sent;
        for (int i = 0; i < 3; i++) {
            if ((size_t)skip >= iov[i].len) {
                skip -= (ptrdiff_t)iov[i].len;
                continue;
            }
            rest[count].base = (const uint8_t *)iov[i].base + skip;
            rest[count].len = iov[i].len - (size_t)skip;
            skip = 0;
            count++;
        }
        ptrdiff_t n = corral_tcp_writev(client, rest, count);
        CHECK(n > 0, "writev returned %td", n);
        sent += n;
    }
    CHECK(read_exact(client, buf, 14) == 14 && memcmp(buf, "scatter-gather", 14) == 0,
          "echo of the gather write: %.14s", buf);
    CHECK(corral_tcp_writev(client, iov, -1) == -EINVAL, "negative iovcnt");

    /* Half-close: the server sees the end of the stream, closes, and we see ours. */
    CHECK(corral_tcp_shutdown(client, CORRAL_SHUT_WR) == 0, "shutdown");
    CHECK(corral_tcp_shutdown(client, 7) == -EINVAL, "shutdown with a bad how");
    CHECK(corral_tcp_read(client, buf, sizeof buf) == 0, "end of stream after the echo");
    CHECK(corral_tcp_write(client, "x", 1) == -EPIPE, "write after shutdown");
    void *echoed = NULL;
    CHECK(corral_join(server, &echoed) == 0, "join the server");
    CHECK((intptr_t)echoed == 19, "server echoed %ld bytes", (long)(intptr_t)echoed);
    corral_tcp_close(client);
    corral_tcp_listener_close(listener);
    return 1;
}

#define TRANSFER_BYTES (8u << 20)

static uint8_t pattern(size_t i) {
    return (uint8_t)((i * 131u) ^ (i >> 11));
}

/* Receives TRANSFER_BYTES, checks every byte, and answers with the count of bad bytes. */
static void *receive_transfer(void *arg) {
    corral_tcp_listener_t *listener = arg;
    corral_tcp_t *conn = NULL;
    if (corral_tcp_accept(listener, &conn, NULL) != 0) {
        return (void *)(intptr_t)-1;
    }
    uint8_t *buf = malloc(65536);
    size_t at = 0;
    uint64_t bad = 0;
    for (;;) {
        ptrdiff_t n = corral_tcp_read(conn, buf, 65536);
        if (n <= 0) {
            break;
        }
        for (ptrdiff_t i = 0; i < n; i++) {
            bad += buf[i] != pattern(at + (size_t)i);
        }
        at += (size_t)n;
    }
    free(buf);
    uint64_t answer[2] = {at, bad};
    ptrdiff_t rc = write_all(conn, (const uint8_t *)answer, sizeof answer);
    corral_tcp_close(conn);
    return (void *)(intptr_t)(rc == (ptrdiff_t)sizeof answer ? 0 : -1);
}

static int test_transfer(void) {
    struct corral_sockaddr local = {.ip = IP, .port = 7008};
    corral_tcp_listener_t *listener = NULL;
    CHECK(corral_tcp_listen(&local, &listener) == 0, "listen");
    corral_thread_t *server = NULL;
    CHECK(corral_spawn(&server, receive_transfer, listener) == 0, "spawn the receiver");
    corral_tcp_t *client = NULL;
    CHECK(corral_tcp_dial(&local, 5000000000ull, &client) == 0, "dial with a time-out");
    uint8_t *data = malloc(TRANSFER_BYTES);
    CHECK(data != NULL, "malloc");
    for (size_t i = 0; i < TRANSFER_BYTES; i++) {
        data[i] = pattern(i);
    }
    /* Uneven writes, so that segment boundaries fall everywhere. */
    size_t at = 0;
    size_t step = 1;
    while (at < TRANSFER_BYTES) {
        size_t len = step < TRANSFER_BYTES - at ? step : TRANSFER_BYTES - at;
        ptrdiff_t n = write_all(client, data + at, len);
        CHECK(n == (ptrdiff_t)len, "write at %zu returned %td", at, n);
        at += len;
        step = step * 3 + 7;
        if (step > 200000) {
            step = 1;
        }
    }
    free(data);
    CHECK(corral_tcp_shutdown(client, CORRAL_SHUT_WR) == 0, "shutdown");
    uint64_t answer[2] = {0, 0};
    CHECK(read_exact(client, (uint8_t *)answer, sizeof answer) == (ptrdiff_t)sizeof answer,
          "the receiver's answer");
    CHECK(answer[0] == TRANSFER_BYTES, "received %llu of %u bytes", (unsigned long long)answer[0],
          TRANSFER_BYTES);
    CHECK(answer[1] == 0, "%llu bytes corrupted", (unsigned long long)answer[1]);
    void *rc = NULL;
    CHECK(corral_join(server, &rc) == 0 && rc == NULL, "the receiver failed");
    corral_tcp_close(client);
    corral_tcp_listener_close(listener);
    return 1;
}

static int test_refused_dial(void) {
    struct corral_sockaddr nobody = {.ip = IP, .port = 7999};
    corral_tcp_t *client = NULL;
    int rc = corral_tcp_dial(&nobody, 0, &client);
    CHECK(rc == -ECONNREFUSED, "dial to a closed port returned %d", rc);
    CHECK(client == NULL, "a connection was stored on failure");
    return 1;
}

static int test_bad_arguments(void) {
    corral_tcp_listener_t *listener = NULL;
    corral_tcp_t *tcp = NULL;
    struct corral_sockaddr any = {0, 0};
    CHECK(corral_tcp_listen(NULL, &listener) == -EINVAL, "NULL address");
    CHECK(corral_tcp_listen(&any, NULL) == -EINVAL, "NULL out");
    CHECK(corral_tcp_dial(NULL, 0, &tcp) == -EINVAL, "NULL remote");
    CHECK(corral_tcp_accept(NULL, &tcp, NULL) == -EINVAL, "NULL listener");
    CHECK(corral_tcp_read(NULL, NULL, 0) == -EINVAL, "NULL connection");
    CHECK(corral_tcp_write(NULL, NULL, 0) == -EINVAL, "NULL connection");
    CHECK(corral_tcp_set_read_timeout(NULL, 1) == -EINVAL, "NULL connection");
    corral_tcp_close(NULL);
    corral_tcp_listener_close(NULL);
    return 1;
}

static int test_read_timeout(void) {
    struct corral_sockaddr local = {.ip = IP, .port = 7009};
    corral_tcp_listener_t *listener = NULL;
    CHECK(corral_tcp_listen(&local, &listener) == 0, "listen");
    corral_tcp_t *client = NULL;
    CHECK(corral_tcp_dial(&local, 0, &client) == 0, "dial");
    corral_tcp_t *server = NULL;
    CHECK(corral_tcp_accept(listener, &server, NULL) == 0, "accept");
    CHECK(corral_tcp_set_read_timeout(client, 20000000) == 0, "read timeout");
    uint8_t b;
    CHECK(corral_tcp_read(client, &b, 1) == -EAGAIN, "a read with nothing sent times out");
    corral_tcp_close(server);
    CHECK(corral_tcp_read(client, &b, 1) == 0, "end of stream after the peer closed");
    corral_tcp_close(client);
    corral_tcp_listener_close(listener);
    return 1;
}

static void run_in_runtime(void *arg) {
    (void)arg;
    run_test("bad_arguments", test_bad_arguments);
    run_test("echo", test_echo);
    run_test("transfer", test_transfer);
    run_test("refused_dial", test_refused_dial);
    run_test("read_timeout", test_read_timeout);
}

static int test_needs_a_network(void) {
    struct corral_sockaddr any = {0, 0};
    corral_tcp_listener_t *listener = NULL;
    CHECK(corral_tcp_listen(&any, &listener) == -ENETDOWN, "listen outside a runtime");
    return 1;
}

int main(void) {
    signal(SIGALRM, on_watchdog);
    alarm(WATCHDOG_SECONDS);

    run_test("needs_a_network", test_needs_a_network);

    /* Standalone: the runtime reaches only its own address, over its loopback. */
    unsetenv("CORRAL_IOKERNELD");
    setenv("CORRAL_IP", IP_TEXT "/24", 1);
    struct corral_config cfg;
    corral_config_default(&cfg);
    cfg.kthreads = 2;
    int rc = corral_run(&cfg, run_in_runtime, NULL);
    if (rc != 0) {
        fprintf(stderr, "corral_run failed: %d\n", rc);
        failed++;
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
