/* Helpers for bench/run.sh, compiled by it with `cc -O2`. Plain C so that nothing but a C compiler
 * is needed; it is not part of the CMake build.
 *
 *   benchtool run RESULT_FILE -- COMMAND [ARGS...]
 *       fork/exec COMMAND, wait4() for it and write one line to RESULT_FILE:
 *           wall_s user_s sys_s maxrss_kb exit_code
 *       user/sys/maxrss are the rusage of COMMAND's process as wait4() returns it (the process
 *       itself plus any children it waited for, e.g. the `sleep` both collectors run, which is
 *       negligible). Exits with COMMAND's exit code (128+signal if it was killed).
 *   benchtool spin SECONDS
 *       burn one CPU until killed, or for at most SECONDS (a safety net against strays).
 *   benchtool work ITERATIONS
 *       a fixed amount of CPU work (a loop through a small call chain, as a profiled program has);
 *       prints the seconds it took (the workload's own slowdown under a collector).
 *   benchtool floor FREQ [--ring PAGES] -- COMMAND [ARGS...]
 *       the kernel's own sampling cost, which every collector pays: cpu-clock at FREQ Hz on every
 *       CPU with what --call-graph dwarf asks of each sample (kernel call chain, user registers,
 *       8 KiB user stack), but no ring, so the kernel prepares each sample and then has nowhere to
 *       put it. Runs COMMAND under it and exits with its exit code.
 *       With --ring, each CPU's event gets a ring of PAGES data pages that wakes at a quarter (as
 *       ringcap's), and this process frees every ring each millisecond without reading it: the
 *       kernel also writes every sample (its 8 KiB stack copy included) and wakes a reader, and
 *       the reader costs next to nothing. What a collector adds above that is its own.
 *   benchtool pingpong SECONDS
 *       two processes bounce one byte over a pair of pipes (a context-switch storm) until
 *       killed or for at most SECONDS; prints the number of round trips to stdout at the end.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/perf_event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double tv_s(struct timeval tv) { return (double)tv.tv_sec + (double)tv.tv_usec / 1e6; }

static int cmd_run(int argc, char** argv) {
    if (argc < 5 || strcmp(argv[3], "--") != 0) {
        fprintf(stderr, "usage: benchtool run RESULT_FILE -- COMMAND [ARGS...]\n");
        return 2;
    }
    const char* result = argv[2];
    /* The script may be interrupted; let the collector see SIGINT itself and stop cleanly. */
    signal(SIGINT, SIG_IGN);
    double t0 = now_s();
    pid_t pid = fork();
    if (pid < 0) { perror("benchtool: fork"); return 2; }
    if (pid == 0) {
        signal(SIGINT, SIG_DFL);
        execvp(argv[4], argv + 4);
        fprintf(stderr, "benchtool: exec %s: %s\n", argv[4], strerror(errno));
        _exit(127);
    }
    int status = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    while (wait4(pid, &status, 0, &ru) < 0) {
        if (errno != EINTR) { perror("benchtool: wait4"); return 2; }
    }
    double wall = now_s() - t0;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    FILE* f = fopen(result, "w");
    if (!f) { perror(result); return 2; }
    fprintf(f, "%.6f %.6f %.6f %ld %d\n", wall, tv_s(ru.ru_utime), tv_s(ru.ru_stime), ru.ru_maxrss, code);
    fclose(f);
    return code;
}

static volatile sig_atomic_t stop_flag;
static void on_stop(int sig) { (void)sig; stop_flag = 1; }

static void install_stop(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop; /* no SA_RESTART: a blocked read/write returns EINTR */
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGALRM, &sa, NULL);
}

static int cmd_spin(int argc, char** argv) {
    unsigned secs = argc > 2 ? (unsigned)atoi(argv[2]) : 600;
    install_stop();
    alarm(secs ? secs : 600);
    volatile unsigned long x = 0;
    while (!stop_flag) x++;
    return 0;
}

__attribute__((noinline)) static unsigned long work_leaf(unsigned long n) {
    volatile unsigned long acc = 0;
    for (unsigned long i = 0; i < n; ++i) acc = acc * 31 + i;
    return acc;
}
__attribute__((noinline)) static unsigned long work_mid(unsigned long n) { return work_leaf(n) + 1; }

static int cmd_work(int argc, char** argv) {
    unsigned long iterations = argc > 2 ? strtoul(argv[2], NULL, 10) : 1000;
    double t0 = now_s();
    unsigned long sum = 0;
    for (unsigned long i = 0; i < iterations; ++i) sum += work_mid(100000);
    printf("%.6f\n", now_s() - t0);
    return (int)(sum & 0);
}

static int cmd_pingpong(int argc, char** argv) {
    unsigned secs = argc > 2 ? (unsigned)atoi(argv[2]) : 600;
    int ab[2], ba[2];
    if (pipe(ab) || pipe(ba)) { perror("benchtool: pipe"); return 2; }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) { perror("benchtool: fork"); return 2; }
    char c = 'x';
    if (pid == 0) {
        /* Echo side: dies with the parent, and ends on EOF. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(0);
        close(ab[1]);
        close(ba[0]);
        for (;;) {
            if (read(ab[0], &c, 1) != 1) _exit(0);
            if (write(ba[1], &c, 1) != 1) _exit(0);
        }
    }
    close(ab[0]);
    close(ba[1]);
    install_stop();
    alarm(secs ? secs : 600);
    unsigned long long trips = 0;
    while (!stop_flag) {
        if (write(ab[1], &c, 1) != 1) break;
        if (read(ba[0], &c, 1) != 1) break;
        ++trips;
    }
    close(ab[1]);
    close(ba[0]);
    waitpid(pid, NULL, 0);
    printf("%llu\n", trips);
    return 0;
}

static int cmd_floor(int argc, char** argv) {
    unsigned long ring_pages = 0;
    int at = 3; /* the "--" */
    if (argc > 5 && strcmp(argv[3], "--ring") == 0) {
        ring_pages = strtoul(argv[4], NULL, 10);
        at = 5;
    }
    if (argc < at + 2 || strcmp(argv[at], "--") != 0 || (at == 5 && (ring_pages == 0 || (ring_pages & (ring_pages - 1))))) {
        fprintf(stderr, "usage: benchtool floor FREQ [--ring PAGES (a power of two)] -- COMMAND [ARGS...]\n");
        return 2;
    }
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.type = PERF_TYPE_SOFTWARE;
    a.config = PERF_COUNT_SW_CPU_CLOCK;
    a.freq = 1;
    a.sample_freq = strtoul(argv[2], NULL, 10);
    a.sample_type = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_PERIOD |
                    PERF_SAMPLE_CALLCHAIN;
    a.exclude_callchain_user = 1;
#if defined(__x86_64__)
    a.sample_type |= PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER;
    a.sample_regs_user = 0xff0fffULL; /* perf's x86_64 user registers for dwarf unwinding */
    a.sample_stack_user = 8192;
#endif
    if (ring_pages) {
        a.watermark = 1;
        a.wakeup_watermark = (unsigned)(ring_pages * 4096 / 4);
    }
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    struct perf_event_mmap_page** rings = calloc((size_t)ncpu, sizeof *rings);
    if (!rings) { perror("benchtool: calloc"); return 2; }
    for (long cpu = 0; cpu < ncpu; ++cpu) {
        /* Left open (and mapped) for the life of the process: the events run until it exits. */
        int fd = (int)syscall(SYS_perf_event_open, &a, -1, (int)cpu, -1, 0);
        if (fd < 0) {
            fprintf(stderr, "benchtool: perf_event_open on cpu %ld: %s\n", cpu, strerror(errno));
            return 2;
        }
        if (ring_pages) {
            void* m = mmap(NULL, (ring_pages + 1) * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (m == MAP_FAILED) {
                fprintf(stderr, "benchtool: mmap of %lu pages on cpu %ld: %s\n", ring_pages, cpu, strerror(errno));
                return 2;
            }
            rings[cpu] = m;
        }
    }
    pid_t pid = fork();
    if (pid < 0) { perror("benchtool: fork"); return 2; }
    if (pid == 0) {
        execvp(argv[at + 1], argv + at + 1);
        fprintf(stderr, "benchtool: exec %s: %s\n", argv[at + 1], strerror(errno));
        _exit(127);
    }
    int status = 0;
    for (;;) {
        pid_t w = waitpid(pid, &status, ring_pages ? WNOHANG : 0);
        if (w == pid) break;
        if (w < 0 && errno != EINTR) { perror("benchtool: waitpid"); return 2; }
        if (!ring_pages) continue;
        /* Free every ring unread. ACQUIRE/RELEASE as a reader's: nothing is read, but the order is
         * the documented one. */
        for (long cpu = 0; cpu < ncpu; ++cpu)
            __atomic_store_n(&rings[cpu]->data_tail, __atomic_load_n(&rings[cpu]->data_head, __ATOMIC_ACQUIRE),
                             __ATOMIC_RELEASE);
        const struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int main(int argc, char** argv) {
    if (argc >= 2 && strcmp(argv[1], "run") == 0) return cmd_run(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "spin") == 0) return cmd_spin(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "pingpong") == 0) return cmd_pingpong(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "work") == 0) return cmd_work(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "floor") == 0) return cmd_floor(argc, argv);
    fprintf(stderr, "usage: benchtool run RESULT -- CMD... | spin SECONDS | pingpong SECONDS | work ITERATIONS | floor FREQ [--ring PAGES] -- CMD...\n");
    return 2;
}
