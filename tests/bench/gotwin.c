// gotwin: the C twin of tests/programs/go/goprog.go (no cgo) for tests/bench/gocost.py.
//
//     gotwin N [IDLE]
//
// The same shape as `goprog N`: N busy worker threads looping over three leaves through
// the same call chain (work -> timed -> leafHeavy/leafLight/leafC -> spin: HEAVY, LIGHT and
// LEAFC rounds of the same multiply-add, each leaf timed with two reads of TWIN_CLOCK, as
// goprog times them); gocost.py sets the four from goprog.go and nocgo.go (-D), the
// defaults below are theirs at the time of writing (the thread's CPU clock: a system call
// each, as goprog's RawSyscall of clock_gettime). One thread blocked in read(2) on a
// pipe nobody writes (goprog's blocker goroutine); IDLE threads (default 3) blocked in
// pthread_cond_wait, a futex wait (the Go runtime's idle threads); the main thread reads
// stdin lines (as goprog's main goroutine), answering "report" with the same "split" line.
// Prints "ready" once every thread has started; exits at the end of stdin.
//
//     gotwin N IDLE WAKERS WAKE_HZ [SIGNAL]
//
// adds what the Go runtime does beside its goroutines (for a control, gocost.py
// --c-runtime): WAKERS threads blocked in nanosleep(2) that wake WAKE_HZ times a second
// (sysmon, and the idle Ms woken to hand a preempted locked goroutine back to its thread);
// with SIGNAL 1, the first of them sends SIGURG (handled: an empty handler) to the workers
// in turn at each of its wakes (sysmon's preemption requests).
//
// Built by gocost.py with `cc -O2 -fomit-frame-pointer -fno-optimize-sibling-calls
// -pthread`: no frame pointers (unwound by DWARF CFI), and every function of the chain
// keeps its frame (-O2 would turn `return spin(n)` into a jump, where Go keeps the call).
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef HEAVY
#define HEAVY 2000000
#endif
#ifndef LIGHT
#define LIGHT 1000000
#endif
#ifndef LEAFC
#define LEAFC 1000000
#endif
#ifndef TWIN_CLOCK
#define TWIN_CLOCK CLOCK_THREAD_CPUTIME_ID
#endif

static uint64_t sink;
static int64_t spent[3];
static const char *names[3] = {"leafHeavy", "leafLight", "leafC"};
static int pipefd[2];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t never = PTHREAD_COND_INITIALIZER;
static pthread_cond_t started_cv = PTHREAD_COND_INITIALIZER;
static int started;
static int nworkers;
static pid_t *worker_tids;
static long wake_ns;
static int signal_workers;

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(TWIN_CLOCK, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

__attribute__((noinline)) static uint64_t spin(int n)
{
	uint64_t x = 1;
	for (int i = 0; i < n; i++) {
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		__asm__ volatile("" : "+r"(x));
	}
	return x;
}

__attribute__((noinline)) static uint64_t leafHeavy(void) { return spin(HEAVY); }
__attribute__((noinline)) static uint64_t leafLight(void) { return spin(LIGHT); }
__attribute__((noinline)) static uint64_t leafC(void) { return spin(LEAFC); }

__attribute__((noinline)) static void timed(int i, uint64_t (*f)(void))
{
	int64_t t = now_ns();
	__atomic_add_fetch(&sink, f(), __ATOMIC_RELAXED);
	__atomic_add_fetch(&spent[i], now_ns() - t, __ATOMIC_RELAXED);
}

__attribute__((noinline)) static void work(void)
{
	for (;;) {
		timed(0, leafHeavy);
		timed(1, leafLight);
		timed(2, leafC);
	}
}

static void mark_started(void)
{
	pthread_mutex_lock(&mu);
	started++;
	pthread_cond_broadcast(&started_cv);
	pthread_mutex_unlock(&mu);
}

static void *worker(void *arg)
{
	worker_tids[(intptr_t)arg] = (pid_t)syscall(SYS_gettid);
	mark_started();
	work();
	return NULL;
}

__attribute__((noinline)) static void blocker(int fd)
{
	char c;
	if (read(fd, &c, 1) < 0)
		perror("read");
}

static void *blocker_main(void *arg)
{
	(void)arg;
	mark_started();
	blocker(pipefd[0]);
	return NULL;
}

static void *idle_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&mu);
	started++;
	pthread_cond_broadcast(&started_cv);
	for (;;)
		pthread_cond_wait(&never, &mu);
	return NULL;
}

static void on_sigurg(int sig) { (void)sig; }

static void *waker_main(void *arg)
{
	intptr_t first = (intptr_t)arg == 0;
	pid_t pid = getpid();
	struct timespec ts = {wake_ns / 1000000000, wake_ns % 1000000000};
	mark_started();
	for (unsigned i = 0;; i++) {
		nanosleep(&ts, NULL);
		if (first && signal_workers && nworkers > 0)
			syscall(SYS_tgkill, pid, worker_tids[i % nworkers], SIGURG);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 3;
	int idle = argc > 2 ? atoi(argv[2]) : 3;
	int wakers = argc > 3 ? atoi(argv[3]) : 0;
	int wake_hz = argc > 4 ? atoi(argv[4]) : 0;
	signal_workers = argc > 5 ? atoi(argv[5]) : 0;
	pthread_t t;

	if (n < 0 || idle < 0 || wakers < 0 || (wakers > 0 && wake_hz <= 0) ||
	    pipe(pipefd) != 0) {
		fprintf(stderr, "usage: gotwin N [IDLE [WAKERS WAKE_HZ [SIGNAL]]]\n");
		return 2;
	}
	nworkers = n;
	worker_tids = calloc(n > 0 ? n : 1, sizeof *worker_tids);
	wake_ns = wakers > 0 ? 1000000000L / wake_hz : 0;
	struct sigaction sa = {.sa_handler = on_sigurg, .sa_flags = SA_RESTART};
	sigaction(SIGURG, &sa, NULL);
	for (intptr_t i = 0; i < n; i++)
		pthread_create(&t, NULL, worker, (void *)i);
	pthread_create(&t, NULL, blocker_main, NULL);
	for (int i = 0; i < idle; i++)
		pthread_create(&t, NULL, idle_main, NULL);
	pthread_mutex_lock(&mu);
	while (started < n + 1 + idle)
		pthread_cond_wait(&started_cv, &mu);
	pthread_mutex_unlock(&mu);
	/* (the wakers once every worker's thread id is known) */
	for (intptr_t i = 0; i < wakers; i++)
		pthread_create(&t, NULL, waker_main, (void *)i);
	pthread_mutex_lock(&mu);
	while (started < n + 1 + idle + wakers)
		pthread_cond_wait(&started_cv, &mu);
	pthread_mutex_unlock(&mu);
	printf("ready\n");
	fflush(stdout);
	char line[256];
	while (fgets(line, sizeof line, stdin)) {
		if (strncmp(line, "report", 6) == 0) {
			printf("split");
			for (int i = 0; i < 3; i++)
				printf(" %s=%lld", names[i],
				       (long long)__atomic_load_n(&spent[i], __ATOMIC_RELAXED));
			printf("\n");
			fflush(stdout);
		}
	}
	return 0;
}
