// goprog: a Go program of known shape for profd's tests (tests/integration/test_go.py).
//
// Workers (the main goroutine and n-1 goroutines, each locked to its own thread) loop over
// three leaves: leafHeavy and leafLight spin in Go (2 000 000 and 1 000 000 rounds), leafC spins
// in C when built with cgo (cspin, through runtime.cgocall and asmcgocall) and in Go
// without. Each leaf's CPU time is summed by the program, which prints the sums (ns) on
// "report" (a line on stdin): the profile's shares are checked against them. One more
// goroutine blocks in read(2) on a pipe, on its own stack, for the /proc path.
package main

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

var sink uint64

// Nanoseconds spent in each leaf, over all workers.
var spent [3]int64

var names = [3]string{"leafHeavy", "leafLight", "leafC"}

//go:noinline
func spin(n int) uint64 {
	var x uint64 = 1
	for i := 0; i < n; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	return x
}

//go:noinline
func leafHeavy() uint64 { return spin(2000000) }

//go:noinline
func leafLight() uint64 { return spin(1000000) }

// The thread's CPU time (each worker is locked to its thread), in ns: what a leaf cost.
// Not the wall clock: a goroutine preempted by Go's scheduler (every 10 ms of running) waits
// for its thread on the scheduler's stack, without its leaf's frames, and leafC, in C, is
// never preempted so: a wall clock would give the Go leaves that wait.
func threadCPU() int64 {
	var ts syscall.Timespec
	syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, 3 /* CLOCK_THREAD_CPUTIME_ID */,
		uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Nano()
}

//go:noinline
func timed(i int, f func() uint64) {
	t := threadCPU()
	atomic.AddUint64(&sink, f())
	atomic.AddInt64(&spent[i], threadCPU()-t)
}

//go:noinline
func work() {
	for {
		timed(0, leafHeavy)
		timed(1, leafLight)
		timed(2, leafC)
	}
}

//go:noinline
func blocker(fd int) {
	buf := make([]byte, 1)
	syscall.Read(fd, buf)
}

func main() {
	n := 3
	if len(os.Args) > 1 {
		n, _ = strconv.Atoi(os.Args[1])
	}
	// A P for every worker and one more: no worker waits for a P (a cgo call's return
	// would wait in exitsyscall, on the scheduler's stack, while the program's clock counts
	// the time as leafC's).
	runtime.GOMAXPROCS(n + 2)
	var p [2]int
	if err := syscall.Pipe(p[:]); err != nil {
		panic(err)
	}
	for i := 0; i < n-1; i++ {
		go func() {
			runtime.LockOSThread()
			work()
		}()
	}
	go blocker(p[0])
	go func() {
		runtime.LockOSThread()
		work()
	}()
	time.Sleep(20 * time.Millisecond)
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() == "report" {
			fmt.Print("split")
			for i := range spent {
				fmt.Printf(" %s=%d", names[i], atomic.LoadInt64(&spent[i]))
			}
			fmt.Println()
		}
	}
	os.Exit(0)
}
