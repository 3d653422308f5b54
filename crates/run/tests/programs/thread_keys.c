// Thread-key destructors: each runs once per thread that set a value, with that value, and a
// destructor that sets a value again gets another round (up to PTHREAD_DESTRUCTOR_ITERATIONS).
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#define THREADS 200

static pthread_key_t key_a, key_b, key_again, key_unset;
static atomic_int runs_a, runs_b, runs_again, runs_unset, wrong_value;
static atomic_int seen[THREADS];

static void destroy_a(void *v) {
    long id = (long)v - 1;
    if (id < 0 || id >= THREADS) { atomic_fetch_add(&wrong_value, 1); return; }
    atomic_fetch_add(&seen[id], 1);
    atomic_fetch_add(&runs_a, 1);
}
static void destroy_b(void *v) { free(v); atomic_fetch_add(&runs_b, 1); }
static void destroy_again(void *v) {
    long round = (long)v;
    atomic_fetch_add(&runs_again, 1);
    if (round < 3) pthread_setspecific(key_again, (void *)(round + 1));
}
static void destroy_unset(void *v) { (void)v; atomic_fetch_add(&runs_unset, 1); }

static void *body(void *arg) {
    long id = (long)arg;
    pthread_setspecific(key_a, (void *)(id + 1));
    pthread_setspecific(key_b, malloc(16));
    pthread_setspecific(key_again, (void *)1L);
    if (pthread_getspecific(key_a) != (void *)(id + 1)) atomic_fetch_add(&wrong_value, 1);
    return NULL;
}

static void *exits_early(void *arg) {
    pthread_setspecific(key_a, arg);
    pthread_exit(NULL);
}

int main(void) {
    pthread_key_create(&key_a, destroy_a);
    pthread_key_create(&key_b, destroy_b);
    pthread_key_create(&key_again, destroy_again);
    pthread_key_create(&key_unset, destroy_unset);
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++) {
        void *(*f)(void *) = i % 2 ? body : exits_early;
        pthread_create(&t[i], NULL, f, (void *)(f == body ? i : i + 1));
    }
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    int once_each = 1;
    for (int i = 0; i < THREADS; i++) once_each &= atomic_load(&seen[i]) == 1;
    printf("destructor a runs %d\n", atomic_load(&runs_a));
    printf("destructor a once per thread %d\n", once_each);
    printf("destructor b runs %d\n", atomic_load(&runs_b));
    printf("destructor again runs %d\n", atomic_load(&runs_again));
    printf("destructor of unset key runs %d\n", atomic_load(&runs_unset));
    printf("wrong values %d\n", atomic_load(&wrong_value));
    return 0;
}
