// fork() while another thread runs: refused under corral-run.
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static int done;

static void *waits(void *arg) {
    (void)arg;
    pthread_mutex_lock(&m);
    while (!done) pthread_cond_wait(&c, &m);
    pthread_mutex_unlock(&m);
    return NULL;
}

int main(void) {
    pthread_t t;
    pthread_create(&t, NULL, waits, NULL);
    pid_t pid = fork();
    if (pid == 0) _exit(0);
    printf("forked %d\n", pid > 0);
    pthread_mutex_lock(&m);
    done = 1;
    pthread_cond_signal(&c);
    pthread_mutex_unlock(&m);
    pthread_join(t, NULL);
    return 0;
}
