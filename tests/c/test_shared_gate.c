/* One gate across processes: sg_shared_gate in a pre-fork server's shape. The master
 * creates an anonymous shared gate (limit 2, a queue) and forks 4 workers that take
 * "requests" from one pipe (as they would accept() on one listening socket); each request
 * arrives at the gate, waits in the queue if need be (a release in any worker grants it),
 * calls a "dependency" that counts its concurrency, and releases. The dependency never
 * sees more than 2 at once and every request is served. Then a worker holding both
 * permits and a queued ticket is killed with SIGKILL: the waiter of another worker is
 * granted (its own wait sweeps the dead worker within ~100 ms), the dead worker's ticket
 * is withdrawn. Also: attach by name after the fork, another config refused, the permit
 * and ticket rules. Compiled as C11 and C++17, static and shared, by tests/c/run.sh. */
#define _DEFAULT_SOURCE
#define _POSIX_C_SOURCE 200809L

#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

#define WORKERS 4
#define REQUESTS 80
#define LIMIT 2.0

static void gate_config(sg_gate_config *c, double limit) {
    OK(sg_gate_config_default(c));
    c->limiter.algorithm = SG_ALGORITHM_FIXED;
    c->limiter.fixed.initial_limit = limit;
    c->limiter.fixed.min_limit = 1;
    c->limiter.fixed.max_limit = limit;
    c->limiter.levels = 1;
    c->queue_capacity = 64;
    c->codel_enabled = false;
    c->lifo = SG_LIFO_NEVER;
}

/* A page shared with the workers: [0] the dependency's current concurrency, [1] its
 * maximum, [2] requests served after waiting in the queue, [3] a flag, [4] a time. */
static volatile uint64_t *shared_page(void) {
    void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) abort();
    memset(p, 0, 4096);
    return (volatile uint64_t *)p;
}

static void sleep_us(long us) {
    struct timespec ts;
    ts.tv_sec = us / 1000000;
    ts.tv_nsec = (us % 1000000) * 1000;
    nanosleep(&ts, NULL);
}

/* One request: arrive, wait if queued, call the dependency, release. 0 if served. */
static int serve(sg_shared_gate *g, volatile uint64_t *dep) {
    sg_shared_gate_permit p;
    sg_shared_ticket t;
    sg_rejection r;
    uint64_t now_in;
    sg_status st = sg_shared_gate_arrive(g, sg_clock_now_ns(), 1, SG_NO_DEADLINE, &p, &t, &r);
    if (st == SG_QUEUED) {
        st = sg_shared_gate_wait(g, &t, 10000000000ull, &p, &r);
        if (st != SG_OK) return 1;
        __atomic_fetch_add(&dep[2], 1, __ATOMIC_SEQ_CST);
    } else if (st != SG_OK) {
        return 2;
    }
    now_in = __atomic_add_fetch(&dep[0], 1, __ATOMIC_SEQ_CST);
    {
        uint64_t max = __atomic_load_n(&dep[1], __ATOMIC_SEQ_CST);
        while (now_in > max && !__atomic_compare_exchange_n(&dep[1], &max, now_in, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
        }
    }
    sleep_us(2000);
    __atomic_fetch_sub(&dep[0], 1, __ATOMIC_SEQ_CST);
    return sg_shared_gate_release(g, &p, sg_clock_now_ns(), SG_OUTCOME_SUCCESS) == SG_OK ? 0 : 3;
}

static void counts(const sg_shared_gate *g, uint32_t *inflight, uint32_t *waiting) {
    double limit = 0;
    OK(sg_shared_gate_inflight(g, inflight, waiting, &limit));
}

/* The pre-fork server: 4 workers, one request pipe, the limit held across them. */
static void test_prefork_server(void) {
    sg_gate_config c;
    sg_shared_gate *g = NULL;
    volatile uint64_t *dep = shared_page();
    pid_t pids[WORKERS];
    int requests[2], replies[2];
    int i, served = 0;
    uint32_t inflight = 9, waiting = 9;
    gate_config(&c, LIMIT);
    OK(sg_shared_gate_open(NULL, &c, &g)); /* anonymous: before the fork */
    CHECK(pipe(requests) == 0 && pipe(replies) == 0);
    for (i = 0; i < WORKERS; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            char req;
            close(requests[1]);
            while (read(requests[0], &req, 1) == 1) { /* EOF: the master closed it */
                char rep = serve(g, dep) == 0 ? 'y' : 'n';
                if (write(replies[1], &rep, 1) != 1) _exit(2);
            }
            _exit(0);
        }
        CHECK(pids[i] > 0);
    }
    close(requests[0]);
    for (i = 0; i < REQUESTS; i++) {
        char req = 'r';
        CHECK(write(requests[1], &req, 1) == 1);
    }
    close(requests[1]);
    for (i = 0; i < REQUESTS; i++) {
        char rep = 0;
        CHECK(read(replies[0], &rep, 1) == 1);
        served += rep == 'y';
    }
    for (i = 0; i < WORKERS; i++) {
        int status = 1;
        CHECK(waitpid(pids[i], &status, 0) == pids[i] && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    printf("test_shared_gate: %d of %d served, max in flight %lu (limit %g), %lu after queueing\n",
           served, REQUESTS, (unsigned long)dep[1], LIMIT, (unsigned long)dep[2]);
    CHECK(served == REQUESTS);
    CHECK(dep[1] <= (uint64_t)LIMIT);
    CHECK(dep[2] > 0); /* grants crossed processes */
    counts(g, &inflight, &waiting);
    CHECK(inflight == 0 && waiting == 0);
    close(replies[0]);
    close(replies[1]);
    sg_shared_gate_free(g);
}

/* A worker killed with both permits and a queued ticket: another worker's waiter is
 * granted without anyone calling reclaim; the dead worker's ticket is withdrawn. */
static void test_kill_with_queued_tickets(void) {
    sg_gate_config c;
    sg_shared_gate *g = NULL;
    volatile uint64_t *flags = shared_page();
    pid_t victim, waiter;
    int status = 0;
    uint32_t inflight = 9, waiting = 9;
    uint64_t reclaimed = 9, killed_at;
    gate_config(&c, LIMIT);
    OK(sg_shared_gate_open(NULL, &c, &g));
    victim = fork();
    if (victim == 0) {
        sg_shared_gate_permit p[2];
        sg_shared_ticket t;
        if (sg_shared_gate_arrive(g, sg_clock_now_ns(), 1, SG_NO_DEADLINE, &p[0], &t, NULL) != SG_OK) _exit(2);
        if (sg_shared_gate_arrive(g, sg_clock_now_ns(), 1, SG_NO_DEADLINE, &p[1], &t, NULL) != SG_OK) _exit(3);
        if (sg_shared_gate_arrive(g, sg_clock_now_ns(), 1, SG_NO_DEADLINE, &p[0], &t, NULL) != SG_QUEUED) _exit(4);
        __atomic_store_n(&flags[3], 1, __ATOMIC_SEQ_CST);
        for (;;) pause(); /* holds them until killed */
    }
    while (__atomic_load_n(&flags[3], __ATOMIC_SEQ_CST) != 1) sleep_us(1000);
    waiter = fork();
    if (waiter == 0) {
        sg_shared_gate_permit p;
        sg_shared_ticket t;
        if (sg_shared_gate_arrive(g, sg_clock_now_ns(), 1, SG_NO_DEADLINE, &p, &t, NULL) != SG_QUEUED) _exit(5);
        __atomic_store_n(&flags[3], 2, __ATOMIC_SEQ_CST);
        if (sg_shared_gate_wait(g, &t, 10000000000ull, &p, NULL) != SG_OK) _exit(6);
        __atomic_store_n(&flags[4], sg_clock_now_ns(), __ATOMIC_SEQ_CST);
        if (sg_shared_gate_release(g, &p, sg_clock_now_ns(), SG_OUTCOME_SUCCESS) != SG_OK) _exit(7);
        _exit(0);
    }
    while (__atomic_load_n(&flags[3], __ATOMIC_SEQ_CST) != 2) sleep_us(1000);
    counts(g, &inflight, &waiting);
    CHECK(inflight == 2 && waiting == 2);
    killed_at = sg_clock_now_ns();
    CHECK(kill(victim, SIGKILL) == 0);
    CHECK(waitpid(waiter, &status, 0) == waiter && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    printf("test_shared_gate: the waiter was granted %lu ms after the kill\n",
           (unsigned long)((flags[4] - killed_at) / 1000000));
    /* The sweep bound is 100 ms; 3 s leaves room for valgrind. */
    CHECK(flags[4] > killed_at && flags[4] - killed_at < 3000000000ull);
    CHECK(waitpid(victim, &status, 0) == victim && WIFSIGNALED(status));
    counts(g, &inflight, &waiting);
    CHECK(inflight == 0 && waiting == 0); /* the victim's ticket was withdrawn */
    OK(sg_shared_gate_reclaim(g, &reclaimed));
    CHECK(reclaimed == 0); /* nothing twice */
    sg_shared_gate_free(g);
}

/* Attach by name after the fork; another config is refused; permit and ticket rules. */
static void test_by_name_and_rules(void) {
    char name[64];
    sg_gate_config c, other;
    sg_shared_gate *g = NULL, *g2 = NULL, *anon = NULL;
    sg_shared_gate_permit p, q, garbage;
    sg_shared_ticket t, bogus;
    sg_rejection r;
    bool created = false;
    pid_t child;
    int status = 1;
    uint64_t routed = 9;
    snprintf(name, sizeof name, "ctest-gate-%ld", (long)getpid());
    gate_config(&c, 1.0);
    gate_config(&other, 3.0);
    (void)sg_shared_gate_unlink(name);
    OK(sg_shared_gate_open(name, &c, &g));
    OK(sg_shared_gate_created(g, &created));
    CHECK(created);
    OK(sg_shared_gate_arrive(g, sg_clock_now_ns(), 1, SG_NO_DEADLINE, &p, &t, &r));
    child = fork();
    if (child == 0) {
        sg_shared_gate *h = NULL;
        sg_shared_gate_permit cp;
        sg_shared_ticket ct;
        bool cr = true;
        if (sg_shared_gate_open(name, &other, &h) != SG_SHM_REFUSED) _exit(2);
        if (sg_shared_gate_open(name, &c, &h) != SG_OK) _exit(3);
        if (sg_shared_gate_created(h, &cr) != SG_OK || cr) _exit(4);
        if (sg_shared_gate_arrive(h, sg_clock_now_ns(), 1, SG_NO_DEADLINE, &cp, &ct, NULL) != SG_QUEUED) _exit(5);
        if (sg_shared_gate_wait(h, &ct, 10000000000ull, &cp, NULL) != SG_OK) _exit(6);
        if (sg_shared_gate_release(h, &cp, sg_clock_now_ns(), SG_OUTCOME_SUCCESS) != SG_OK) _exit(7);
        sg_shared_gate_free(h);
        _exit(0);
    }
    {
        uint32_t inflight = 0, waiting = 0;
        do {
            sleep_us(1000);
            counts(g, &inflight, &waiting);
        } while (waiting == 0);
    }
    OK(sg_shared_gate_release(g, &p, sg_clock_now_ns(), SG_OUTCOME_SUCCESS)); /* grants the child */
    CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* Permits: released once; garbage and zeroed storage refused; another gate's refused. */
    EXPECT(sg_shared_gate_release(g, &p, sg_clock_now_ns(), SG_OUTCOME_SUCCESS), SG_ALREADY_RELEASED);
    memset(&garbage, 0x5A, sizeof garbage);
    EXPECT(sg_shared_gate_release(g, &garbage, sg_clock_now_ns(), SG_OUTCOME_SUCCESS), SG_INVALID_HANDLE);
    OK(sg_shared_gate_open(NULL, &c, &anon));
    OK(sg_shared_gate_arrive(anon, sg_clock_now_ns(), 1, SG_NO_DEADLINE, &q, &t, &r));
    EXPECT(sg_shared_gate_release(g, &q, sg_clock_now_ns(), SG_OUTCOME_SUCCESS), SG_FOREIGN_HANDLE);
    /* Tickets: a queued one cancelled once; another gate's and garbage refused. */
    EXPECT(sg_shared_gate_arrive(anon, sg_clock_now_ns(), 1, SG_NO_DEADLINE, &p, &t, &r), SG_QUEUED);
    EXPECT(sg_shared_gate_wait(anon, &t, 0, &p, &r), SG_QUEUED);
    EXPECT(sg_shared_gate_cancel(g, &t), SG_FOREIGN_HANDLE);
    OK(sg_shared_gate_cancel(anon, &t));
    EXPECT(sg_shared_gate_cancel(anon, &t), SG_UNKNOWN_TICKET);
    EXPECT(sg_shared_gate_wait(anon, &t, 0, &p, &r), SG_UNKNOWN_TICKET);
    memset(&bogus, 0x77, sizeof bogus);
    CHECK(sg_shared_gate_cancel(anon, &bogus) == SG_FOREIGN_HANDLE);
    OK(sg_shared_gate_poll(anon, sg_clock_now_ns(), &routed));
    CHECK(routed == 0); /* the cancelled ticket is never granted */
    OK(sg_shared_gate_release(anon, &q, sg_clock_now_ns(), SG_OUTCOME_SUCCESS));
    /* Bad input. */
    EXPECT(sg_shared_gate_open("bad name", &c, &g2), SG_INVALID_ARGUMENT);
    CHECK(g2 == NULL);
    c.queue_capacity = 257;
    EXPECT(sg_shared_gate_open(NULL, &c, &g2), SG_CONFIG_OUT_OF_RANGE);
    EXPECT(sg_shared_gate_arrive(g, SG_MAX_NOW + 1, 1, SG_NO_DEADLINE, &p, &t, &r), SG_TIME_OUT_OF_RANGE);
    EXPECT(sg_shared_gate_arrive(NULL, sg_clock_now_ns(), 1, SG_NO_DEADLINE, &p, &t, &r), SG_NULL_ARGUMENT);
    OK(sg_shared_gate_unlink(name));
    EXPECT(sg_shared_gate_unlink(name), SG_SHM_UNAVAILABLE);
    sg_shared_gate_free(anon);
    sg_shared_gate_free(g);
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0); /* no buffered output is copied into the children */
    test_prefork_server();
    test_kill_with_queued_tickets();
    test_by_name_and_rules();
    return SUMMARY("test_shared_gate");
}
