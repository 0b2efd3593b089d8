/* Regression tests for the C ABI failures a new user found: each case failed (or did not
 * compile) on the library before its fix. Compiled as C11 and C++17, static and shared,
 * and run under valgrind by tests/c/run.sh. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define MS SG_MS
#define SEC SG_SEC

/* Field by field: the structs have padding, whose bytes are not defined. */
static int same_gate_metrics(const sg_gate_metrics *a, const sg_gate_metrics *b) {
    return a->waiting == b->waiting && a->queued == b->queued && a->granted == b->granted &&
           a->expired == b->expired && a->cancelled == b->cancelled &&
           a->evicted == b->evicted && a->limiter.inflight == b->limiter.inflight &&
           a->limiter.admitted == b->limiter.admitted && a->limiter.limit == b->limiter.limit;
}

/* 1: a config refusal names its field, as the C struct spells it. */
static void test_config_field_named(void) {
    sg_gate_config cfg;
    sg_gate *g = NULL;
    OK(sg_gate_config_default(&cfg));
    cfg.limiter.gradient.buffer = NAN;
    EXPECT(sg_gate_new(&cfg, &g), SG_CONFIG_NOT_FINITE);
    CHECK(strcmp(sg_last_error_field(), "limiter.gradient.buffer") == 0);
    CHECK(g == NULL);
    OK(sg_gate_config_default(&cfg));
    cfg.queue_capacity = 0;
    EXPECT(sg_gate_new(&cfg, &g), SG_CONFIG_OUT_OF_RANGE);
    CHECK(strcmp(sg_last_error_field(), "queue_capacity") == 0);
    OK(sg_gate_config_default(&cfg));
    OK(sg_gate_new(&cfg, &g));
    CHECK(strcmp(sg_last_error_field(), "") == 0); /* cleared by a success */
    sg_gate_free(g);
}

/* 2: structs grow through their reserved words: a config as a program built against this
 * header sends it (reserved zero) is accepted; a non-zero reserved word (a setting this
 * version does not know) is refused, not ignored; metrics write them 0. */
static void test_reserved_words(void) {
    sg_limiter_config cfg;
    sg_limiter *l = NULL;
    sg_limiter_metrics m;
    OK(sg_limiter_config_default(&cfg));
    CHECK(cfg.reserved[0] == 0 && cfg.reserved[3] == 0 && cfg.gradient.reserved[0] == 0);
    cfg.reserved[2] = 1;
    EXPECT(sg_limiter_new(&cfg, &l), SG_CONFIG_OUT_OF_RANGE);
    CHECK(strcmp(sg_last_error_field(), "reserved") == 0);
    cfg.reserved[2] = 0;
    cfg.aimd.reserved[0] = 5; /* an unused algorithm's block, too */
    EXPECT(sg_limiter_new(&cfg, &l), SG_CONFIG_OUT_OF_RANGE);
    CHECK(strcmp(sg_last_error_field(), "aimd.reserved") == 0);
    cfg.aimd.reserved[0] = 0;
    OK(sg_limiter_new(&cfg, &l));
    memset(&m, 0xAB, sizeof m);
    OK(sg_limiter_metrics_get(l, &m));
    CHECK(m.reserved[0] == 0 && m.reserved[3] == 0);
    sg_limiter_free(l);
}

/* 3: moving onto a live permit is refused and loses nothing. */
static void test_move_onto_live(void) {
    sg_limiter_config cfg;
    sg_limiter *l = NULL;
    sg_permit a, b;
    bool live = false;
    uint32_t inflight = 0;
    OK(sg_limiter_config_default(&cfg));
    cfg.algorithm = SG_ALGORITHM_FIXED;
    cfg.fixed.initial_limit = 4;
    OK(sg_limiter_new(&cfg, &l));
    OK(sg_limiter_try_acquire(l, 1 * MS, SG_LEVEL_CRITICAL, &a, NULL));
    OK(sg_limiter_try_acquire(l, 1 * MS, SG_LEVEL_CRITICAL, &b, NULL));
    EXPECT(sg_permit_move(&a, &b), SG_INVALID_ARGUMENT);
    OK(sg_permit_is_live(&a, &live));
    CHECK(live);
    OK(sg_permit_is_live(&b, &live));
    CHECK(live);
    OK(sg_limiter_inflight(l, &inflight));
    CHECK(inflight == 2);
    OK(sg_limiter_release(l, &a, 2 * MS, SG_OUTCOME_SUCCESS));
    OK(sg_limiter_release(l, &b, 2 * MS, SG_OUTCOME_SUCCESS));
    OK(sg_limiter_inflight(l, &inflight));
    CHECK(inflight == 0);
    /* A released permit may be moved onto. */
    OK(sg_limiter_try_acquire(l, 3 * MS, SG_LEVEL_CRITICAL, &a, NULL));
    OK(sg_permit_move(&a, &b));
    OK(sg_limiter_release(l, &b, 4 * MS, SG_OUTCOME_SUCCESS));
    sg_limiter_free(l);
}

/* 4: cancelling a ticket this gate never issued changes nothing and says so with one of
 * the two statuses the header documents for it. */
static void test_cancel_unknown_ticket(void) {
    sg_gate_config cfg;
    sg_gate *g = NULL, *other = NULL;
    sg_permit p, q;
    uint64_t ticket = 0, other_ticket = 0;
    sg_gate_metrics before, after;
    sg_status st;
    OK(sg_gate_config_default(&cfg));
    cfg.limiter.algorithm = SG_ALGORITHM_FIXED;
    cfg.limiter.fixed.initial_limit = 1;
    cfg.limiter.levels = 1;
    OK(sg_gate_new(&cfg, &g));
    OK(sg_gate_new(&cfg, &other));
    OK(sg_gate_arrive(g, 1 * MS, SG_LEVEL_CRITICAL, SG_NO_DEADLINE, &p, &ticket, NULL));
    EXPECT(sg_gate_arrive(g, 1 * MS, SG_LEVEL_CRITICAL, SG_NO_DEADLINE, &q, &ticket, NULL),
           SG_QUEUED);
    OK(sg_gate_arrive(other, 1 * MS, SG_LEVEL_CRITICAL, SG_NO_DEADLINE, &q, &other_ticket, NULL));
    EXPECT(sg_gate_arrive(other, 1 * MS, SG_LEVEL_CRITICAL, SG_NO_DEADLINE, &q, &other_ticket,
                          NULL),
           SG_QUEUED);
    OK(sg_gate_metrics_get(g, &before));
    EXPECT(sg_gate_cancel(g, other_ticket), SG_FOREIGN_HANDLE);
    st = sg_gate_cancel(g, 0x0123456789ABCDEFull); /* never issued by anyone */
    CHECK(st == SG_UNKNOWN_TICKET || st == SG_FOREIGN_HANDLE);
    st = sg_gate_cancel(g, ticket ^ 0x40000000ull); /* same gate and slot, never issued */
    CHECK(st == SG_UNKNOWN_TICKET || st == SG_FOREIGN_HANDLE);
    OK(sg_gate_metrics_get(g, &after));
    CHECK(same_gate_metrics(&before, &after));
    OK(sg_gate_cancel(g, ticket));
    EXPECT(sg_gate_cancel(g, ticket), SG_UNKNOWN_TICKET); /* already left */
    OK(sg_gate_cancel(other, other_ticket));
    OK(sg_gate_release(g, &p, 2 * MS, SG_OUTCOME_SUCCESS));
    OK(sg_gate_release(other, &q, 2 * MS, SG_OUTCOME_SUCCESS));
    sg_gate_free(g);
    sg_gate_free(other);
}

/* 5: unused settings are checked by the same rule as used ones. */
static void test_unused_settings_checked(void) {
    sg_gate_config cfg;
    sg_limiter_config lc;
    sg_gate *g = NULL;
    sg_limiter *l = NULL;
    OK(sg_gate_config_default(&cfg));
    cfg.codel_enabled = false;
    cfg.codel_interval_ns = 0;
    EXPECT(sg_gate_new(&cfg, &g), SG_CONFIG_OUT_OF_RANGE);
    CHECK(strcmp(sg_last_error_field(), "codel_interval_ns") == 0);
    OK(sg_gate_config_default(&cfg));
    cfg.lifo = SG_LIFO_NEVER;
    cfg.lifo_occupancy = NAN;
    EXPECT(sg_gate_new(&cfg, &g), SG_CONFIG_NOT_FINITE);
    CHECK(strcmp(sg_last_error_field(), "lifo_occupancy") == 0);
    OK(sg_gate_config_default(&cfg));
    cfg.aging_enabled = false;
    cfg.aging_from = 9;
    EXPECT(sg_gate_new(&cfg, &g), SG_CONFIG_OUT_OF_RANGE);
    CHECK(strcmp(sg_last_error_field(), "aging_from") == 0);
    OK(sg_limiter_config_default(&lc));
    lc.algorithm = SG_ALGORITHM_FIXED;
    lc.gradient.buffer = NAN;
    EXPECT(sg_limiter_new(&lc, &l), SG_CONFIG_NOT_FINITE);
    CHECK(strcmp(sg_last_error_field(), "gradient.buffer") == 0);
    OK(sg_limiter_config_default(&lc));
    lc.max_window_ns = UINT64_MAX;
    EXPECT(sg_limiter_new(&lc, &l), SG_CONFIG_OUT_OF_RANGE);
    CHECK(strcmp(sg_last_error_field(), "max_window_ns") == 0);
    OK(sg_limiter_config_default(&lc));
    lc.window_rtt_multiple = 0.0;
    EXPECT(sg_limiter_new(&lc, &l), SG_CONFIG_OUT_OF_RANGE);
    CHECK(strcmp(sg_last_error_field(), "window_rtt_multiple") == 0);
    CHECK(g == NULL && l == NULL);
}

/* 6: the JSON writer: a never-hint omits retry_after_s; only refusals are written. */
static void test_json_writer(void) {
    sg_rejection never = {SG_REASON_RATE_LIMITED, SG_NEVER};
    sg_rejection soon = {SG_REASON_LIMIT_REACHED, 1500 * MS};
    sg_actionable a;
    char body[SG_ACTIONABLE_BODY_MAX];
    size_t len = 0;
    OK(sg_actionable_from(&never, &a));
    CHECK(a.retry_after_s == 0);
    OK(sg_actionable_write_json(&a, body, sizeof body, &len));
    CHECK(strstr(body, "retry_after_s") == NULL);
    CHECK(strstr(body, "18446744074") == NULL);
    CHECK(strstr(body, "\"retry\": \"not by waiting\"") != NULL);
    CHECK(len == strlen(body));
    OK(sg_actionable_from(&soon, &a));
    CHECK(a.status == 503 && a.retry_after_s == 2);
    OK(sg_actionable_write_json(&a, body, sizeof body, &len));
    CHECK(strstr(body, "\"retry_after_s\": 2") != NULL);
    a.status = 200;
    len = 7;
    EXPECT(sg_actionable_write_json(&a, body, sizeof body, &len), SG_INVALID_ARGUMENT);
    CHECK(len == 7);
    a.status = 500;
    EXPECT(sg_actionable_write_json(&a, body, sizeof body, &len), SG_INVALID_ARGUMENT);
}

/* 7: the lag meter reports over-consumption; backoff attempt 0 is refused; queries take
 * const handles (this file does not compile against a header where they do not). */
static void test_smaller_gaps(void) {
    sg_lag_meter_config lc;
    sg_lag_meter *m = NULL;
    const sg_lag_meter *cm;
    sg_lag_metrics lm;
    uint64_t v = 0;
    sg_backoff_config bc;
    sg_backoff *b = NULL;
    const sg_backoff *cb;
    OK(sg_lag_meter_config_default(&lc));
    OK(sg_lag_meter_new(&lc, &m));
    cm = m;
    OK(sg_lag_meter_record_produced(m, 1 * MS, 5));
    OK(sg_lag_meter_record_consumed(m, 2 * MS, 8));
    OK(sg_lag_meter_metrics_get(cm, 3 * MS, &lm));
    CHECK(lm.lag == 0 && lm.over_consumed == 3);
    OK(sg_lag_meter_lag(cm, 3 * MS, &v));
    CHECK(v == 0);
    OK(sg_lag_meter_lag_time(cm, 3 * MS, &v));
    OK(sg_lag_meter_time_to_drain(cm, 3 * MS, &v));
    OK(sg_lag_meter_record_produced(m, 4 * MS, 10));
    OK(sg_lag_meter_metrics_get(cm, 5 * MS, &lm));
    CHECK(lm.lag == 7 && lm.over_consumed == 0);
    sg_lag_meter_free(m);

    OK(sg_backoff_config_default(&bc));
    OK(sg_backoff_new(&bc, &b));
    cb = b;
    v = 99;
    EXPECT(sg_backoff_next_delay(b, 0, 0, &v), SG_INVALID_ARGUMENT);
    EXPECT(sg_backoff_ceiling(cb, 0, &v), SG_INVALID_ARGUMENT);
    CHECK(v == 99);
    OK(sg_backoff_ceiling(cb, 1, &v));
    CHECK(v == bc.base_ns);
    sg_backoff_free(b);
}

/* A `now` above SG_MAX_NOW is refused and moves nothing. */
static void test_now_out_of_range(void) {
    sg_limiter_config cfg;
    sg_limiter *l = NULL;
    sg_limiter_metrics before, after;
    sg_permit p;
    memset(&p, 0, sizeof p);
    OK(sg_limiter_config_default(&cfg));
    OK(sg_limiter_new(&cfg, &l));
    OK(sg_limiter_metrics_get(l, &before));
    EXPECT(sg_limiter_try_acquire(l, SG_MAX_NOW + 1, SG_LEVEL_NORMAL, &p, NULL),
           SG_TIME_OUT_OF_RANGE);
    EXPECT(sg_limiter_note_arrival(l, UINT64_MAX, SG_LEVEL_NORMAL), SG_TIME_OUT_OF_RANGE);
    OK(sg_limiter_metrics_get(l, &after));
    CHECK(before.admitted == after.admitted && before.rejected == after.rejected &&
          before.inflight == after.inflight && before.limit == after.limit);
    OK(sg_limiter_try_acquire(l, SG_MAX_NOW, SG_LEVEL_NORMAL, &p, NULL));
    OK(sg_limiter_release(l, &p, SG_MAX_NOW, SG_OUTCOME_SUCCESS));
    sg_limiter_free(l);
}

/* The pump acts on a due wakeup. A fractional limit (1.8) holds its one whole slot back
 * for critical; a normal waiter queues behind a critical holder. When critical releases,
 * the held-back slot is re-checked only at `sg_gate_next_wakeup`: a pump that waits for
 * the next release or arrival instead leaves the waiter queued with nothing in flight. */
static void test_pump_acts_on_due_wakeup(void) {
    sg_gate_config cfg;
    sg_gate *g = NULL;
    sg_gate_event ev[4];
    sg_permit crit, normal;
    uint64_t ticket = 0, now = 10 * MS, wake = 0;
    size_t n = 0, rounds = 0, granted = 0;
    uint32_t waiting = 0;
    memset(&normal, 0, sizeof normal);
    OK(sg_gate_config_default(&cfg));
    cfg.limiter.algorithm = SG_ALGORITHM_FIXED;
    cfg.limiter.fixed.initial_limit = 1.8;
    cfg.limiter.fixed.min_limit = 1.0;
    cfg.limiter.fixed.max_limit = 2.0;
    cfg.limiter.active_ns = 5 * MS; /* critical's reservation lapses 5 ms after it last came */
    cfg.codel_enabled = false;
    OK(sg_gate_new(&cfg, &g));
    OK(sg_gate_arrive(g, now, SG_LEVEL_CRITICAL, SG_NO_DEADLINE, &crit, &ticket, NULL));
    EXPECT(sg_gate_arrive(g, now, SG_LEVEL_NORMAL, SG_NO_DEADLINE, &normal, &ticket, NULL),
           SG_QUEUED);
    OK(sg_gate_poll(g, now, ev, 4, &n));
    CHECK(n == 0);
    now += 1 * MS;
    OK(sg_gate_release(g, &crit, now, SG_OUTCOME_SUCCESS));
    /* The pump: poll after the release, then sleep until next_wakeup and poll again, with
     * no other event. Each round jumps the clock to the wakeup. */
    for (rounds = 0; rounds < 100 && granted == 0; rounds++) {
        size_t i;
        OK(sg_gate_poll(g, now, ev, 4, &n));
        for (i = 0; i < n; i++) {
            CHECK(ev[i].kind == SG_EVENT_GRANTED && ev[i].ticket == ticket);
            if (ev[i].kind == SG_EVENT_GRANTED) {
                OK(sg_permit_move(&ev[i].permit, &normal));
                granted++;
            }
        }
        if (granted) {
            break;
        }
        OK(sg_gate_waiting_total(g, &waiting));
        CHECK(waiting == 1);
        OK(sg_gate_next_wakeup(g, now, &wake));
        CHECK(wake != SG_NEVER); /* a waiter with a free slot: a re-check is due */
        if (wake == SG_NEVER) {
            break;
        }
        CHECK(wake >= now);
        now = wake;
    }
    CHECK(granted == 1);
    CHECK(rounds > 1); /* it took a wakeup, not just the poll after the release */
    OK(sg_gate_waiting_total(g, &waiting));
    CHECK(waiting == 0);
    if (granted) {
        OK(sg_gate_release(g, &normal, now + MS, SG_OUTCOME_SUCCESS));
    }
    sg_gate_free(g);
}

/* Found by the sweep: the isolation math took one step per shard of `k`, so a hostile
 * `k` (UINT32_MAX - 1) made one call take about ten seconds. */
static void test_isolation_bounded(void) {
    sg_isolation iso;
    EXPECT(sg_isolation_compute(UINT32_MAX, UINT32_MAX - 1, &iso), SG_INVALID_ARGUMENT);
    EXPECT(sg_isolation_compute(SG_ISOLATION_MAX_SHARDS + 1, 2, &iso), SG_INVALID_ARGUMENT);
    OK(sg_isolation_compute(SG_ISOLATION_MAX_SHARDS, SG_ISOLATION_MAX_SHARDS - 1, &iso));
    OK(sg_isolation_compute(1024, 2, &iso));
    CHECK(iso.share_all > 0.0 && iso.share_all < 1e-5);
}

/* Found by measuring: constructors build objects by value on the stack (a 4096-waiter gate
 * needed more than 2 MiB; 1.5 MiB since it is written in place). The stacks the header
 * recommends (4 MiB for a gate, 1 MiB for a keyed table) are enough. */
static void *build_in_thread(void *arg) {
    sg_status *st = (sg_status *)arg;
    sg_gate_config gc;
    sg_gate *g = NULL;
    sg_keyed_config kc;
    sg_keyed *k = NULL;
    if (st[2]) {
        sg_gate_config_default(&gc);
        gc.queue_capacity = SG_GATE_MAX_QUEUE;
        st[0] = sg_gate_new(&gc, &g);
        sg_gate_free(g);
    } else {
        sg_keyed_config_default(&kc);
        kc.shards = 1024;
        st[1] = sg_keyed_new(&kc, &k);
        sg_keyed_free(k);
    }
    return NULL;
}
static void test_constructor_stack_bounds(void) {
    sg_status st[3] = {SG_PANIC, SG_PANIC, SG_OK};
    size_t stacks[2] = {4096u * 1024u, 1024u * 1024u};
    int i;
    for (i = 0; i < 2; i++) {
        pthread_attr_t a;
        pthread_t t;
        st[2] = i == 0 ? SG_PANIC : SG_OK; /* non-zero: build the gate */
        CHECK(pthread_attr_init(&a) == 0);
        CHECK(pthread_attr_setstacksize(&a, stacks[i]) == 0);
        CHECK(pthread_create(&t, &a, build_in_thread, st) == 0);
        CHECK(pthread_join(t, NULL) == 0);
        pthread_attr_destroy(&a);
    }
    EXPECT(st[0], SG_OK);
    EXPECT(st[1], SG_OK);
}

int main(void) {
    test_config_field_named();
    test_reserved_words();
    test_move_onto_live();
    test_cancel_unknown_ticket();
    test_unused_settings_checked();
    test_json_writer();
    test_smaller_gaps();
    test_now_out_of_range();
    test_pump_acts_on_due_wakeup();
    test_isolation_bounded();
    test_constructor_stack_bounds();
    return SUMMARY("fixes");
}
