// An OpenMP parallel region: libgomp's threads wait with raw futex system calls.
#include <omp.h>
#include <stdio.h>

int main(void) {
    long sum = 0;
#pragma omp parallel for num_threads(2) reduction(+ : sum)
    for (int i = 0; i < 1000; i++) sum += i;
    printf("sum %ld\n", sum);
    return 0;
}
