// Echoes stdin to stdout, writes to stderr, then ends as argv[1] says: "status N" exits with
// N from a thread, "signal N" raises signal N, "return N" returns N from main.
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int code;
static void *exits(void *arg) {
    (void)arg;
    exit(code);
}

int main(int argc, char **argv) {
    char buf[256];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, stdin)) > 0) fwrite(buf, 1, n, stdout);
    fprintf(stderr, "to stderr\n");
    fflush(stdout);
    if (argc < 3) return 1;
    code = atoi(argv[2]);
    if (strcmp(argv[1], "status") == 0) {
        pthread_t t;
        pthread_create(&t, NULL, exits, NULL);
        pthread_join(t, NULL);
    }
    if (strcmp(argv[1], "signal") == 0) raise(code);
    return code;
}
