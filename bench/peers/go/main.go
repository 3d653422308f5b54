// Command go-peer measures basic thread operations on Go goroutines so they
// can be compared with Corral and pthreads by the benchmark runner.
//
// Output: one JSON object per op on stdout, e.g.
//
//	{"peer":"go","op":"yield","unit":"ns_per_op","samples":[12.3,11.9]}
//
// Diagnostics go to stderr. See ../README.md.
package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

var (
	reps  = flag.Int("reps", 11, "number of timed repetitions per op")
	scale = flag.Float64("scale", 1.0, "multiplier for iteration counts")
	cpu0  = flag.Int("cpu0", 0, "first CPU")
	cpu1  = flag.Int("cpu1", 1, "second CPU")
	ops   = flag.String("ops", "", "comma-separated subset of ops (default: all)")
)

var allOps = []string{"yield", "spawn_join", "mutex", "condvar", "wake_latency", "spawn_throughput"}

func die(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "go-peer: "+format+"\n", args...)
	os.Exit(1)
}

// scaled returns round(base*scale), at least 1.
func scaled(base float64) int {
	n := int(math.Round(base * *scale))
	if n < 1 {
		n = 1
	}
	return n
}

// base is the reference point for monotonic timestamps (time.Since uses the
// monotonic clock reading embedded in base).
var base = time.Now()

func nowNs() int64 { return int64(time.Since(base)) }

func spinFor(d time.Duration) {
	end := nowNs() + int64(d)
	for nowNs() < end {
	}
}

// ---- CPU affinity -------------------------------------------------------

// setAffinity pins every OS thread of the process to the given CPUs. Linux
// affinity is per thread, so we walk /proc/self/task; threads created later
// inherit the mask of their creator. Repeat until no new threads appear.
func setAffinity(cpus ...int) {
	var mask [16]uint64 // 1024 CPUs
	for _, c := range cpus {
		if c < 0 || c >= 1024 {
			die("cpu %d out of range", c)
		}
		mask[c/64] |= 1 << (uint(c) % 64)
	}
	done := map[int]bool{}
	for pass := 0; pass < 10; pass++ {
		d, err := os.ReadDir("/proc/self/task")
		if err != nil {
			die("reading /proc/self/task: %v", err)
		}
		newTids := 0
		for _, e := range d {
			tid, err := strconv.Atoi(e.Name())
			if err != nil || done[tid] {
				continue
			}
			_, _, errno := syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY,
				uintptr(tid), unsafe.Sizeof(mask), uintptr(unsafe.Pointer(&mask[0])))
			if errno != 0 && errno != syscall.ESRCH {
				die("sched_setaffinity(%d, %v): %v", tid, cpus, errno)
			}
			done[tid] = true
			newTids++
		}
		if newTids == 0 {
			return
		}
	}
}

// ---- ops ----------------------------------------------------------------
// Each op function runs one timed batch and returns ns per operation.

// yield: two goroutines on one P, each calls Gosched K times.
func opYield(k int) float64 {
	var wg sync.WaitGroup
	wg.Add(2)
	start := time.Now()
	for g := 0; g < 2; g++ {
		go func() {
			for i := 0; i < k; i++ {
				runtime.Gosched()
			}
			wg.Done()
		}()
	}
	wg.Wait()
	return float64(time.Since(start).Nanoseconds()) / float64(2*k)
}

// spawn_join: spawn a goroutine producing a value, wait for it, check it.
func opSpawnJoin(k int) float64 {
	start := time.Now()
	for i := 0; i < k; i++ {
		var wg sync.WaitGroup
		var result int
		wg.Add(1)
		go func() {
			result = i + 1
			wg.Done()
		}()
		wg.Wait()
		if result != i+1 {
			die("spawn_join: got %d want %d", result, i+1)
		}
	}
	return float64(time.Since(start).Nanoseconds()) / float64(k)
}

var (
	mu       sync.Mutex
	mutexCtr uint64
)

// mutex: uncontended Lock/Unlock on one goroutine.
func opMutex(k int) float64 {
	before := mutexCtr
	start := time.Now()
	for i := 0; i < k; i++ {
		mu.Lock()
		mutexCtr++
		mu.Unlock()
	}
	el := time.Since(start)
	if mutexCtr-before != uint64(k) {
		die("mutex: counter %d want %d", mutexCtr-before, k)
	}
	return float64(el.Nanoseconds()) / float64(k)
}

// condvar: ping-pong between two goroutines through one mutex, one
// sync.Cond and a turn flag. n hand-offs in total.
func opCondvar(n int) float64 {
	if n%2 == 1 {
		n++
	}
	var m sync.Mutex
	c := sync.NewCond(&m)
	turn := 0
	var wg sync.WaitGroup
	wg.Add(2)
	player := func(me int) {
		other := 1 - me
		for i := 0; i < n/2; i++ {
			m.Lock()
			for turn != me {
				c.Wait()
			}
			turn = other
			c.Signal()
			m.Unlock()
		}
		wg.Done()
	}
	start := time.Now()
	go player(0)
	go player(1)
	wg.Wait()
	return float64(time.Since(start).Nanoseconds()) / float64(n)
}

// wake_latency: the waker stamps t0 and sends on an unbuffered channel on
// which the waiter is blocked; the waiter stamps t1 right after the receive
// returns and publishes t1-t0. After the send the waker busy-spins (at least
// 50us, and until the waiter has published) so that the waker's P never runs
// the waiter itself: the waiter must be picked up by the other P. Between
// rounds the waker spins 200us so the waiter is blocked and its P/M idle.
// Returns the median latency in ns.
func opWakeLatency(rounds int) float64 {
	ch := make(chan int64)
	var result atomic.Int64
	go func() {
		for {
			t0, ok := <-ch
			t1 := nowNs()
			if !ok {
				return
			}
			result.Store(t1 - t0)
		}
	}()
	lat := make([]float64, rounds)
	for r := 0; r < rounds; r++ {
		result.Store(-1)
		spinFor(200 * time.Microsecond)
		t0 := nowNs()
		ch <- t0
		minEnd := t0 + int64(50*time.Microsecond)
		giveUp := t0 + int64(100*time.Millisecond)
		for {
			v := result.Load()
			now := nowNs()
			if v >= 0 && now >= minEnd {
				lat[r] = float64(v)
				break
			}
			if now > giveUp {
				// Should not happen with GOMAXPROCS(2); avoid spinning forever.
				runtime.Gosched()
			}
		}
	}
	close(ch)
	return median(lat)
}

// spawn_throughput: spawn batches of 1000 goroutines that each increment an
// atomic counter, wait for each batch. Returns ns per spawned goroutine.
func opSpawnThroughput(batches int) float64 {
	const batch = 1000
	var ctr atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for b := 0; b < batches; b++ {
		wg.Add(batch)
		for i := 0; i < batch; i++ {
			go func() {
				ctr.Add(1)
				wg.Done()
			}()
		}
		wg.Wait()
	}
	el := time.Since(start)
	if got := ctr.Load(); got != int64(batches*batch) {
		die("spawn_throughput: counter %d want %d", got, batches*batch)
	}
	return float64(el.Nanoseconds()) / float64(batches*batch)
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// ---- driver -------------------------------------------------------------

type spec struct {
	procs int   // GOMAXPROCS
	cpus  []int // affinity of the whole process
	n     int   // per-repetition size
	warm  int   // warm-up size
	run   func(int) float64
}

func specFor(op string) spec {
	one := []int{*cpu0}
	two := []int{*cpu0, *cpu1}
	mk := func(procs int, cpus []int, n, warmMin int, f func(int) float64) spec {
		w := n / 10
		if w < warmMin {
			w = warmMin
		}
		return spec{procs, cpus, n, w, f}
	}
	switch op {
	case "yield":
		return mk(1, one, scaled(1_000_000), 1, opYield)
	case "spawn_join":
		return mk(1, one, scaled(200_000), 1, opSpawnJoin)
	case "mutex":
		return mk(1, one, scaled(10_000_000), 1, opMutex)
	case "condvar":
		return mk(1, one, scaled(200_000), 2, opCondvar)
	case "wake_latency":
		n := int(math.Round(200 * math.Max(*scale, 0.05)))
		if n < 10 {
			n = 10
		}
		return mk(2, two, n, 10, opWakeLatency)
	case "spawn_throughput":
		return mk(2, two, scaled(1_000_000/1000), 1, opSpawnThroughput)
	}
	die("unknown op %q (known: %s)", op, strings.Join(allOps, ","))
	panic("unreachable")
}

func main() {
	flag.Parse()
	if flag.NArg() > 0 {
		die("unexpected arguments: %v", flag.Args())
	}
	if *reps < 1 {
		die("--reps must be >= 1")
	}
	if !(*scale > 0) {
		die("--scale must be > 0")
	}
	selected := allOps
	if *ops != "" {
		selected = strings.Split(*ops, ",")
	}
	specs := make([]spec, len(selected))
	for i, op := range selected {
		specs[i] = specFor(strings.TrimSpace(op)) // validate all before running
	}
	for i, op := range selected {
		s := specs[i]
		runtime.GOMAXPROCS(s.procs)
		setAffinity(s.cpus...)
		runtime.GC()
		s.run(s.warm)
		samples := make([]string, *reps)
		for r := 0; r < *reps; r++ {
			runtime.GC()
			v := s.run(s.n)
			samples[r] = strconv.FormatFloat(v, 'f', 3, 64)
		}
		fmt.Fprintf(os.Stdout, "{\"peer\":\"go\",\"op\":%q,\"unit\":\"ns_per_op\",\"samples\":[%s]}\n",
			strings.TrimSpace(op), strings.Join(samples, ","))
	}
}
