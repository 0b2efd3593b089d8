/* The shared rate limiter, retry budget and keyed limits (sg_rate_limiter, sg_retry_budget,
 * sg_keyed) in a pre-fork server's shape: the master creates them anonymously and
 * forks workers. One rate and one budget across all workers (not one per worker); per-key
 * caps across workers; workers holding key permits are killed with SIGKILL and the
 * master's next acquires get exactly their permits back. Also: by name after the fork,
 * refusals (another config, bad names, another table's permit) and bad input.
 * Compiled as C11 and C++17, static and shared, by tests/c/run.sh. */
#define _POSIX_C_SOURCE 200809L

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

#define WORKERS 4

static int wait_ok(pid_t pid) {
    int status = 0;
    return waitpid(pid, &status, 0) == pid && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* 4 workers each try 10 units of one rate (burst 10, almost no refill) and 10 retries of
 * one budget funded by 4 deposits at 50 %: 10 units and 2 retries across all of them. */
static void test_rate_and_budget_across_workers(void) {
    sg_rate_limiter_config rc;
    sg_retry_budget_config bc;
    sg_rate_limiter *rate = NULL;
    sg_retry_budget *budget = NULL;
    int to_master[2];
    pid_t pids[WORKERS];
    int i, units = 0, retries = 0;
    uint64_t now = sg_clock_now_ns(), avail = 0;
    uint64_t freed = 9;
    uint32_t ravail = 0;
    bool created = false;
    OK(sg_rate_limiter_config_default(&rc));
    rc.per_second = 0.001;
    rc.burst = 10;
    OK(sg_retry_budget_config_default(&bc));
    bc.min_retries_per_sec = 0;
    bc.percent_can_retry = 0.5;
    OK(sg_rate_limiter_open_shared(NULL, &rc, &rate));
    OK(sg_retry_budget_open_shared(NULL, &bc, &budget));
    OK(sg_rate_limiter_created(rate, &created));
    CHECK(created);
    OK(sg_retry_budget_created(budget, &created));
    CHECK(created);
    for (i = 0; i < 4; i++) OK(sg_retry_budget_deposit(budget, now));
    OK(sg_retry_budget_available(budget, now, &avail));
    CHECK(avail == 2);
    OK(sg_rate_limiter_available(rate, now, &ravail));
    CHECK(ravail == 10);
    CHECK(pipe(to_master) == 0);
    for (i = 0; i < WORKERS; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            char got[2] = {0, 0};
            int k;
            for (k = 0; k < 10; k++) {
                if (sg_rate_limiter_check(rate, now, 1, NULL) == SG_OK) got[0]++;
                if (sg_retry_budget_try_withdraw(budget, now, NULL) == SG_OK) got[1]++;
            }
            _exit(write(to_master[1], got, 2) == 2 ? 0 : 2);
        }
        CHECK(pids[i] > 0);
    }
    for (i = 0; i < WORKERS; i++) {
        char got[2];
        CHECK(read(to_master[0], got, 2) == 2);
        units += got[0];
        retries += got[1];
        CHECK(wait_ok(pids[i]) == 0);
    }
    CHECK(units == 10);  /* one burst across the workers */
    CHECK(retries == 2); /* 4 deposits x 50 % */
    {
        sg_rejection r;
        EXPECT(sg_rate_limiter_check(rate, now, 1, &r), SG_REJECTED);
        CHECK(r.reason == SG_REASON_RATE_LIMITED && r.retry_after_ns > 0);
        EXPECT(sg_retry_budget_try_withdraw(budget, now, &r), SG_REJECTED);
        CHECK(r.reason == SG_REASON_BUDGET_EXHAUSTED);
    }
    OK(sg_retry_budget_reclaim(budget, &freed));
    CHECK(freed == 0); /* no worker died inside a fold */
    close(to_master[0]);
    close(to_master[1]);
    sg_rate_limiter_free(rate);
    sg_retry_budget_free(budget);
}

static void keyed_config(sg_keyed_config *c) {
    OK(sg_keyed_config_default(c));
    c->shards = 16;
    c->shards_per_key = 1;
    c->shard_limit = 2;
}

static uint64_t in_flight(const sg_keyed *k) {
    sg_keyed_metrics m;
    OK(sg_keyed_metrics_get(k, &m));
    return m.in_flight;
}

/* Workers take key permits and are killed holding them: exactly theirs come back. */
static void test_keyed_kill(void) {
    sg_keyed_config c;
    sg_keyed *k = NULL;
    int to_master[2], to_workers[2];
    pid_t pids[WORKERS];
    int i;
    uint64_t key = 0, reclaimed = 99;
    sg_permit mine[3];
    sg_rejection r;
    keyed_config(&c);
    OK(sg_keyed_hash_key(7, (const uint8_t *)"tenant-a", 8, &key));
    OK(sg_keyed_open_shared(NULL, &c, &k));
    CHECK(pipe(to_master) == 0 && pipe(to_workers) == 0);
    for (i = 0; i < WORKERS; i++) {
        pids[i] = fork();
        if (pids[i] == 0) { /* hold a permit of the key if admitted, until killed */
            sg_permit p;
            char go;
            char got = sg_keyed_try_acquire(k, key, sg_clock_now_ns(), 1, &p, NULL) == SG_OK ? 'y' : 'n';
            if (write(to_master[1], &got, 1) != 1) _exit(2);
            if (read(to_workers[0], &go, 1) != 1) _exit(3);
            _exit(0);
        }
        CHECK(pids[i] > 0);
    }
    {
        int admitted = 0;
        for (i = 0; i < WORKERS; i++) {
            char got = 0;
            CHECK(read(to_master[0], &got, 1) == 1);
            admitted += got == 'y';
        }
        CHECK(admitted == 2); /* the key's one shard holds 2, across all workers */
    }
    CHECK(in_flight(k) == 2);
    EXPECT(sg_keyed_try_acquire(k, key, sg_clock_now_ns(), 1, &mine[0], &r), SG_REJECTED);
    CHECK(r.reason == SG_REASON_KEY_LIMIT);
    OK(sg_keyed_reclaim(k, &reclaimed));
    CHECK(reclaimed == 0); /* live workers are never reclaimed */
    for (i = 0; i < WORKERS; i++) {
        int status = 0;
        CHECK(kill(pids[i], SIGKILL) == 0);
        CHECK(waitpid(pids[i], &status, 0) == pids[i]);
    }
    {
        struct timespec ten_ms = {0, 10000000};
        int tries;
        sg_status st = SG_REJECTED;
        for (tries = 0; tries < 200 && st != SG_OK; tries++) {
            st = sg_keyed_try_acquire(k, key, sg_clock_now_ns(), 1, &mine[0], NULL);
            if (st != SG_OK) nanosleep(&ten_ms, NULL);
        }
        EXPECT(st, SG_OK);
    }
    OK(sg_keyed_try_acquire(k, key, sg_clock_now_ns(), 1, &mine[1], NULL));
    EXPECT(sg_keyed_try_acquire(k, key, sg_clock_now_ns(), 1, &mine[2], NULL), SG_REJECTED);
    OK(sg_keyed_reclaim(k, &reclaimed));
    CHECK(reclaimed == 0); /* nothing twice */
    CHECK(in_flight(k) == 2);
    OK(sg_keyed_release(k, &mine[0]));
    EXPECT(sg_keyed_release(k, &mine[0]), SG_ALREADY_RELEASED);
    OK(sg_keyed_release(k, &mine[1]));
    CHECK(in_flight(k) == 0);
    close(to_master[0]);
    close(to_master[1]);
    close(to_workers[0]);
    close(to_workers[1]);
    sg_keyed_free(k);
}

/* By name: a worker attaches after the fork; another config is refused. */
static void test_by_name(void) {
    char name[96], rname[110], bname[110];
    sg_keyed_config c, other;
    sg_keyed *a = NULL, *b = NULL, *refused = NULL;
    sg_rate_limiter_config rc;
    sg_retry_budget_config bc;
    sg_rate_limiter *ra = NULL, *rb = NULL;
    sg_retry_budget *ba = NULL, *bb = NULL;
    bool created = true;
    pid_t pid;
    uint64_t key = 42;
    snprintf(name, sizeof name, "ctest-keyed-%ld-%lu", (long)getpid(), (unsigned long)sg_clock_now_ns());
    snprintf(rname, sizeof rname, "%s-rate", name);
    snprintf(bname, sizeof bname, "%s-budget", name);
    keyed_config(&c);
    OK(sg_rate_limiter_config_default(&rc));
    rc.per_second = 0.001; /* no refill during the test */
    OK(sg_retry_budget_config_default(&bc));
    pid = fork();
    if (pid == 0) {
        sg_keyed *w = NULL;
        sg_rate_limiter *wr = NULL;
        sg_retry_budget *wb = NULL;
        sg_permit p;
        int ok = sg_keyed_open_shared(name, &c, &w) == SG_OK &&
                 sg_keyed_try_acquire(w, key, sg_clock_now_ns(), 1, &p, NULL) == SG_OK &&
                 sg_keyed_release(w, &p) == SG_OK && sg_rate_limiter_open_shared(rname, &rc, &wr) == SG_OK &&
                 sg_rate_limiter_check(wr, sg_clock_now_ns(), 3, NULL) == SG_OK &&
                 sg_retry_budget_open_shared(bname, &bc, &wb) == SG_OK && sg_retry_budget_deposit(wb, sg_clock_now_ns()) == SG_OK;
        sg_keyed_free(w);
        sg_rate_limiter_free(wr);
        sg_retry_budget_free(wb);
        _exit(ok ? 0 : 1);
    }
    CHECK(pid > 0 && wait_ok(pid) == 0);
    OK(sg_keyed_open_shared(name, &c, &a));
    OK(sg_keyed_created(a, &created));
    CHECK(!created);
    OK(sg_keyed_open_shared(name, &c, &b));
    other = c;
    other.shard_limit = 3;
    EXPECT(sg_keyed_open_shared(name, &other, &refused), SG_SHM_REFUSED);
    other = c;
    other.shards = 64;
    EXPECT(sg_keyed_open_shared(name, &other, &refused), SG_SHM_REFUSED); /* another size */
    CHECK(refused == NULL);
    {
        sg_permit p, q;
        sg_keyed_metrics m;
        memset(&q, 0, sizeof q);
        OK(sg_keyed_try_acquire(a, key, sg_clock_now_ns(), 1, &p, NULL));
        CHECK(in_flight(b) == 1); /* one segment, seen through both handles */
        EXPECT(sg_keyed_release(b, &p), SG_FOREIGN_HANDLE);
        EXPECT(sg_keyed_release(a, &q), SG_INVALID_HANDLE);
        EXPECT(sg_keyed_release(a, NULL), SG_NULL_ARGUMENT);
        EXPECT(sg_keyed_try_acquire(a, key, SG_MAX_NOW + 1, 1, &q, NULL), SG_TIME_OUT_OF_RANGE);
        CHECK(in_flight(a) == 1);
        OK(sg_keyed_release(a, &p));
        OK(sg_keyed_metrics_get(a, &m));
        CHECK(m.admitted == 2 && m.in_flight == 0 && m.shards == 16);
    }
    /* The rate and budget the worker used by name: one segment each. */
    {
        uint32_t ravail = 0;
        uint64_t bavail = 0;
        OK(sg_rate_limiter_open_shared(rname, &rc, &ra));
        OK(sg_rate_limiter_open_shared(rname, &rc, &rb));
        OK(sg_rate_limiter_created(ra, &created));
        CHECK(!created);
        OK(sg_rate_limiter_available(rb, sg_clock_now_ns(), &ravail));
        CHECK(ravail == rc.burst - 3); /* the worker took 3 */
        OK(sg_retry_budget_open_shared(bname, &bc, &ba));
        OK(sg_retry_budget_open_shared(bname, &bc, &bb));
        OK(sg_retry_budget_available(bb, sg_clock_now_ns(), &bavail));
        CHECK(bavail >= 1);
        rc.burst = 11;
        EXPECT(sg_rate_limiter_open_shared(rname, &rc, &ra), SG_SHM_REFUSED);
        EXPECT(sg_retry_budget_open_shared(rname, &bc, &ba), SG_SHM_REFUSED); /* another kind */
    }
    sg_keyed_free(a);
    sg_keyed_free(b);
    sg_rate_limiter_free(ra);
    sg_rate_limiter_free(rb);
    sg_retry_budget_free(ba);
    sg_retry_budget_free(bb);
    OK(sg_keyed_unlink_shared(name));
    OK(sg_rate_limiter_unlink_shared(rname));
    OK(sg_retry_budget_unlink_shared(bname));
    EXPECT(sg_keyed_unlink_shared(name), SG_SHM_UNAVAILABLE);
}

static void test_bad_input(void) {
    sg_keyed_config c;
    sg_rate_limiter_config rc;
    sg_retry_budget_config bc;
    sg_keyed *k = NULL;
    sg_rate_limiter *r = NULL;
    sg_retry_budget *b = NULL;
    uint64_t n = 0;
    uint32_t u = 0;
    bool flag = false;
    keyed_config(&c);
    OK(sg_rate_limiter_config_default(&rc));
    OK(sg_retry_budget_config_default(&bc));
    EXPECT(sg_keyed_open_shared("", &c, &k), SG_INVALID_ARGUMENT);
    EXPECT(sg_keyed_open_shared("bad name", &c, &k), SG_INVALID_ARGUMENT);
    EXPECT(sg_keyed_open_shared(NULL, NULL, &k), SG_NULL_ARGUMENT);
    EXPECT(sg_keyed_open_shared(NULL, &c, NULL), SG_NULL_ARGUMENT);
    c.shards = 17;
    EXPECT(sg_keyed_open_shared(NULL, &c, &k), SG_CONFIG_OUT_OF_RANGE);
    keyed_config(&c);
    c.shard_limit = 0;
    EXPECT(sg_keyed_open_shared(NULL, &c, &k), SG_CONFIG_OUT_OF_RANGE);
    CHECK(k == NULL);
    rc.emission_ns = 1000; /* the shared rate takes per_second only */
    EXPECT(sg_rate_limiter_open_shared(NULL, &rc, &r), SG_CONFIG_OUT_OF_RANGE);
    rc.emission_ns = 0;
    rc.per_second = -1;
    EXPECT(sg_rate_limiter_open_shared(NULL, &rc, &r), SG_CONFIG_OUT_OF_RANGE);
    EXPECT(sg_rate_limiter_open_shared("bad name", &rc, &r), SG_CONFIG_OUT_OF_RANGE); /* config first */
    CHECK(r == NULL);
    bc.percent_can_retry = -1;
    EXPECT(sg_retry_budget_open_shared(NULL, &bc, &b), SG_CONFIG_OUT_OF_RANGE);
    CHECK(b == NULL);
    EXPECT(sg_keyed_unlink_shared(NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_rate_limiter_unlink_shared(""), SG_INVALID_ARGUMENT);
    EXPECT(sg_retry_budget_unlink_shared(NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_keyed_reclaim(NULL, &n), SG_NULL_ARGUMENT);
    EXPECT(sg_keyed_created(NULL, &flag), SG_NULL_ARGUMENT);
    EXPECT(sg_keyed_metrics_get(NULL, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_keyed_try_acquire(NULL, 1, 0, 1, NULL, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_rate_limiter_check(NULL, 0, 1, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_rate_limiter_available(NULL, 0, &u), SG_NULL_ARGUMENT);
    EXPECT(sg_rate_limiter_created(NULL, &flag), SG_NULL_ARGUMENT);
    EXPECT(sg_retry_budget_deposit(NULL, 0), SG_NULL_ARGUMENT);
    EXPECT(sg_retry_budget_try_withdraw(NULL, 0, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_retry_budget_available(NULL, 0, &n), SG_NULL_ARGUMENT);
    EXPECT(sg_retry_budget_created(NULL, &flag), SG_NULL_ARGUMENT);
    EXPECT(sg_retry_budget_reclaim(NULL, &n), SG_NULL_ARGUMENT);
    sg_keyed_free(NULL);
    sg_rate_limiter_free(NULL);
    sg_retry_budget_free(NULL);
}

int main(void) {
    test_rate_and_budget_across_workers();
    test_keyed_kill();
    test_by_name();
    test_bad_input();
    return SUMMARY("test_shared_more");
}
