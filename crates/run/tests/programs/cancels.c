// pthread_cancel: refused under corral-run.
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static void *sleeps(void *arg) {
    (void)arg;
    for (;;) sleep(1);
    return NULL;
}

int main(void) {
    pthread_t t;
    pthread_create(&t, NULL, sleeps, NULL);
    pthread_cancel(t);
    pthread_join(t, NULL);
    printf("cancelled\n");
    return 0;
}
