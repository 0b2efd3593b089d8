/* One limit across processes: sg_limiter in a pre-fork server's shape. The master
 * creates an anonymous shared limiter of limit 2, forks 4 workers that each try to hold
 * a permit: exactly 2 are admitted across all of them. The workers holding permits are
 * killed with SIGKILL; the master's next acquires get both permits back (a refused
 * acquire sweeps the dead workers' permits). Also: attach by name after the fork,
 * refusals (another config, bad names), and the permit rules (released once, not to
 * another limiter). Compiled as C11 and C++17, static and shared, by tests/c/run.sh. */
#define _POSIX_C_SOURCE 200809L

#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

#define WORKERS 4
#define LIMIT 2.0

static void fixed_config(sg_limiter_config *c, double limit) {
    OK(sg_limiter_config_default(c));
    c->algorithm = SG_ALGORITHM_FIXED;
    c->fixed.initial_limit = limit;
    c->fixed.min_limit = 1;
    c->fixed.max_limit = limit;
    c->levels = 1;
}

static uint32_t inflight_of(const sg_limiter *l) {
    uint32_t n = 0;
    OK(sg_limiter_inflight(l, &n));
    return n;
}

/* Pre-fork: 4 workers, limit 2; kill -9 the holders; the master gets their permits. */
static void test_prefork_and_kill(void) {
    sg_limiter_config c;
    sg_limiter *l = NULL;
    pid_t pids[WORKERS];
    int to_master[2], to_workers[2];
    int i;
    bool created = false;
    sg_permit mine[3];
    sg_rejection r;
    uint64_t reclaimed = 99;
    fixed_config(&c, LIMIT);
    OK(sg_limiter_open_shared(NULL, &c, &l)); /* anonymous: before the fork */
    OK(sg_limiter_created(l, &created));
    CHECK(created);
    CHECK(pipe(to_master) == 0 && pipe(to_workers) == 0);
    for (i = 0; i < WORKERS; i++) {
        pids[i] = fork();
        if (pids[i] == 0) { /* a worker: take one permit and hold it until killed */
            sg_permit p;
            char go;
            char got = sg_limiter_try_acquire(l, sg_clock_now_ns(), 0, &p, NULL) == SG_OK ? 'y' : 'n';
            if (write(to_master[1], &got, 1) != 1) _exit(2);
            if (read(to_workers[0], &go, 1) != 1) _exit(3); /* EOF when the master ends */
            _exit(0);
        }
        CHECK(pids[i] > 0);
    }
    for (i = 0; i < WORKERS; i++) {
        char got = 0;
        CHECK(read(to_master[0], &got, 1) == 1);
        (void)got;
    }
    CHECK(inflight_of(l) == (uint32_t)LIMIT); /* exactly L admitted across the workers */
    /* The master is refused too while they live. */
    EXPECT(sg_limiter_try_acquire(l, sg_clock_now_ns(), 0, &mine[0], &r), SG_REJECTED);
    CHECK(r.reason == SG_REASON_LIMIT_REACHED);
    for (i = 0; i < WORKERS; i++) {
        int status = 0;
        CHECK(kill(pids[i], SIGKILL) == 0);
        CHECK(waitpid(pids[i], &status, 0) == pids[i]);
    }
    /* The sweeps run at most once per 100 ms: retry for up to 2 s. */
    {
        struct timespec ten_ms = {0, 10000000};
        int tries;
        sg_status st = SG_REJECTED;
        for (tries = 0; tries < 200 && st != SG_OK; tries++) {
            st = sg_limiter_try_acquire(l, sg_clock_now_ns(), 0, &mine[0], NULL);
            if (st != SG_OK) nanosleep(&ten_ms, NULL);
        }
        EXPECT(st, SG_OK);
    }
    OK(sg_limiter_try_acquire(l, sg_clock_now_ns(), 0, &mine[1], NULL));
    EXPECT(sg_limiter_try_acquire(l, sg_clock_now_ns(), 0, &mine[2], NULL), SG_REJECTED);
    OK(sg_limiter_reclaim(l, &reclaimed));
    CHECK(reclaimed == 0); /* nothing reclaimed twice */
    CHECK(inflight_of(l) == 2);
    OK(sg_limiter_release(l, &mine[0], sg_clock_now_ns(), SG_OUTCOME_SUCCESS));
    OK(sg_limiter_release(l, &mine[1], sg_clock_now_ns(), SG_OUTCOME_SUCCESS));
    CHECK(inflight_of(l) == 0);
    close(to_master[0]);
    close(to_master[1]);
    close(to_workers[0]);
    close(to_workers[1]);
    sg_limiter_free(l);
}

/* By name: a worker forked first attaches after the fork; another config is refused. */
static void test_by_name(void) {
    char name[96];
    sg_limiter_config c, other;
    sg_limiter *a = NULL, *b = NULL, *refused = NULL;
    bool created = true;
    pid_t pid;
    int status = 0;
    snprintf(name, sizeof name, "ctest-shared-%ld-%lu", (long)getpid(), (unsigned long)sg_clock_now_ns());
    fixed_config(&c, 3);
    pid = fork();
    if (pid == 0) {
        sg_limiter *w = NULL;
        sg_permit p;
        int ok = sg_limiter_open_shared(name, &c, &w) == SG_OK &&
                 sg_limiter_try_acquire(w, sg_clock_now_ns(), 0, &p, NULL) == SG_OK &&
                 sg_limiter_release(w, &p, sg_clock_now_ns(), SG_OUTCOME_SUCCESS) == SG_OK;
        sg_limiter_free(w);
        _exit(ok ? 0 : 1);
    }
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    OK(sg_limiter_open_shared(name, &c, &a)); /* attaches to the worker's segment */
    OK(sg_limiter_created(a, &created));
    CHECK(!created);
    OK(sg_limiter_open_shared(name, &c, &b));
    fixed_config(&other, 4);
    EXPECT(sg_limiter_open_shared(name, &other, &refused), SG_SHM_REFUSED);
    CHECK(refused == NULL);
    {
        sg_permit p, q;
        memset(&q, 0, sizeof q);
        OK(sg_limiter_try_acquire(a, sg_clock_now_ns(), 0, &p, NULL));
        CHECK(inflight_of(b) == 1); /* one segment, seen through both handles */
        EXPECT(sg_limiter_release(b, &p, sg_clock_now_ns(), SG_OUTCOME_SUCCESS), SG_FOREIGN_HANDLE);
        EXPECT(sg_limiter_release(a, &p, SG_MAX_NOW + 1, SG_OUTCOME_SUCCESS), SG_TIME_OUT_OF_RANGE);
        EXPECT(sg_limiter_release(a, &p, sg_clock_now_ns(), 99), SG_INVALID_ARGUMENT);
        CHECK(inflight_of(a) == 1); /* refusals changed nothing */
        OK(sg_limiter_release(a, &p, sg_clock_now_ns(), SG_OUTCOME_SUCCESS));
        EXPECT(sg_limiter_release(a, &p, sg_clock_now_ns(), SG_OUTCOME_SUCCESS), SG_ALREADY_RELEASED);
        EXPECT(sg_limiter_release(a, &q, sg_clock_now_ns(), SG_OUTCOME_SUCCESS), SG_INVALID_HANDLE);
        EXPECT(sg_limiter_release(a, NULL, sg_clock_now_ns(), SG_OUTCOME_SUCCESS), SG_NULL_ARGUMENT);
        EXPECT(sg_limiter_try_acquire(a, SG_MAX_NOW + 1, 0, &p, NULL), SG_TIME_OUT_OF_RANGE);
        EXPECT(sg_limiter_try_acquire(a, sg_clock_now_ns(), 8, &p, NULL), SG_INVALID_ARGUMENT);
        CHECK(inflight_of(a) == 0);
    }
    sg_limiter_free(a);
    sg_limiter_free(b);
    OK(sg_limiter_unlink_shared(name));
    EXPECT(sg_limiter_unlink_shared(name), SG_SHM_UNAVAILABLE); /* gone */
}

static void test_bad_input(void) {
    sg_limiter_config c;
    sg_limiter *l = NULL;
    char long_name[256];
    memset(long_name, 'a', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = 0;
    fixed_config(&c, 2);
    EXPECT(sg_limiter_open_shared("", &c, &l), SG_INVALID_ARGUMENT);
    EXPECT(sg_limiter_open_shared("bad name", &c, &l), SG_INVALID_ARGUMENT);
    EXPECT(sg_limiter_open_shared(long_name, &c, &l), SG_INVALID_ARGUMENT);
    EXPECT(sg_limiter_open_shared("\xff", &c, &l), SG_INVALID_ARGUMENT);
    EXPECT(sg_limiter_open_shared(NULL, NULL, &l), SG_NULL_ARGUMENT);
    EXPECT(sg_limiter_open_shared(NULL, &c, NULL), SG_NULL_ARGUMENT);
    c.fixed.initial_limit = -1;
    EXPECT(sg_limiter_open_shared(NULL, &c, &l), SG_CONFIG_OUT_OF_RANGE);
    CHECK(l == NULL);
    EXPECT(sg_limiter_unlink_shared(NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_limiter_unlink_shared(""), SG_INVALID_ARGUMENT);
    EXPECT(sg_limiter_inflight(NULL, NULL), SG_NULL_ARGUMENT);
    sg_limiter_free(NULL);
    {
        uint64_t n = 0;
        bool b = false;
        EXPECT(sg_limiter_reclaim(NULL, &n), SG_NULL_ARGUMENT);
        EXPECT(sg_limiter_created(NULL, &b), SG_NULL_ARGUMENT);
    }
}

/* One handle type, two placements: a local and a shared sg_limiter answer the same calls,
 * and a permit of one is foreign to the other (nothing changes). */
static void test_one_handle_type_two_placements(void) {
    sg_limiter_config c;
    sg_limiter *local = NULL, *shared = NULL;
    sg_permit pl, ps;
    bool created = false;
    uint64_t reclaimed = 99;
    double limit = 0;
    fixed_config(&c, 2);
    OK(sg_limiter_new(&c, &local));
    OK(sg_limiter_open_shared(NULL, &c, &shared));
    OK(sg_limiter_created(local, &created));
    CHECK(created); /* a local limiter is always its handle's own */
    OK(sg_limiter_reclaim(local, &reclaimed));
    CHECK(reclaimed == 0); /* nothing to give back in one process */
    OK(sg_limiter_limit(shared, &limit));
    CHECK(limit == 2);
    OK(sg_limiter_try_acquire(local, 10, 0, &pl, NULL));
    OK(sg_limiter_try_acquire(shared, sg_clock_now_ns(), 0, &ps, NULL));
    EXPECT(sg_limiter_release(shared, &pl, sg_clock_now_ns(), SG_OUTCOME_SUCCESS), SG_FOREIGN_HANDLE);
    EXPECT(sg_limiter_release(local, &ps, 20, SG_OUTCOME_SUCCESS), SG_FOREIGN_HANDLE);
    CHECK(inflight_of(local) == 1 && inflight_of(shared) == 1); /* refusals changed nothing */
    {
        sg_permit_info info;
        OK(sg_permit_info_get(&ps, &info));
        CHECK(info.kind == SG_PERMIT_KIND_LIMITER && info.level == 0 && info.started_at_ns > 0);
        OK(sg_permit_info_get(&pl, &info));
        CHECK(info.kind == SG_PERMIT_KIND_LIMITER && info.started_at_ns == 10);
    }
    OK(sg_limiter_release(local, &pl, 20, SG_OUTCOME_SUCCESS));
    OK(sg_limiter_release(shared, &ps, sg_clock_now_ns(), SG_OUTCOME_SUCCESS));
    CHECK(inflight_of(local) == 0 && inflight_of(shared) == 0);
    sg_limiter_free(local);
    sg_limiter_free(shared);
}

int main(void) {
    test_one_handle_type_two_placements();
    test_prefork_and_kill();
    test_by_name();
    test_bad_input();
    return SUMMARY("test_shared");
}
