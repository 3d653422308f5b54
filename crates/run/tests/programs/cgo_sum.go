// A Go program with cgo: goroutines on several threads call into C. The Go runtime checks at
// start-up that its stack pointer lies within the bounds pthread_getattr_np reports.
package main

/*
#include <stdint.h>
static int64_t sum_to(int64_t n) {
	int64_t s = 0;
	for (int64_t i = 1; i <= n; i++)
		s += i;
	return s;
}
*/
import "C"

import (
	"fmt"
	"sync"
)

func main() {
	const workers = 4
	var wg sync.WaitGroup
	sums := make([]int64, workers)
	for i := range sums {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			sums[i] = int64(C.sum_to(C.int64_t(1000 * (i + 1))))
		}(i)
	}
	wg.Wait()
	fmt.Println(sums)
}
