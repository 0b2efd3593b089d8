/* The gate through the C ABI: every function, every error status, and the event pump
 * (admitted / queued / granted / expired / evicted / shed / cancelled). */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define MS SG_MS
#define SEC SG_SEC

/* A gate with a fixed limit, no CoDel, FIFO: every decision is deterministic. */
static void plain_config(sg_gate_config *cfg, double limit, uint32_t levels, uint32_t capacity) {
    uint32_t i;
    OK(sg_gate_config_default(cfg));
    cfg->limiter.algorithm = SG_ALGORITHM_FIXED;
    cfg->limiter.fixed.initial_limit = limit;
    cfg->limiter.fixed.min_limit = 1.0;
    cfg->limiter.fixed.max_limit = limit;
    cfg->limiter.levels = levels;
    for (i = 0; i < SG_MAX_LEVELS; i++) {
        cfg->limiter.weights[i] = 0.0;
    }
    cfg->queue_capacity = capacity;
    cfg->codel_enabled = false;
    cfg->lifo = SG_LIFO_NEVER;
}

/* Field by field: the structs have padding, whose bytes are not defined. */
static int same_gate_metrics(const sg_gate_metrics *a, const sg_gate_metrics *b) {
    return a->waiting == b->waiting && a->queued == b->queued && a->granted == b->granted &&
           a->expired == b->expired && a->cancelled == b->cancelled &&
           a->evicted == b->evicted && a->limiter.inflight == b->limiter.inflight &&
           a->limiter.admitted == b->limiter.admitted && a->limiter.limit == b->limiter.limit;
}

static void test_configs(void) {
    sg_gate_config cfg;
    sg_gate *g = NULL;

    OK(sg_gate_config_default(&cfg));
    CHECK(cfg.queue_capacity == 256 && cfg.codel_enabled && cfg.codel_target_ns == 5 * MS);
    CHECK(cfg.lifo == SG_LIFO_CODEL_OVERLOADED && cfg.max_wait_ns == 0 && !cfg.aging_enabled);
    CHECK(cfg.fallback_retry_after_ns == SEC && cfg.limiter.levels == 3);
    {
        sg_gate *h = NULL;
        void *mem = NULL;
        size_t size = sg_gate_size(), align = sg_gate_align();
        EXPECT(sg_gate_config_default(NULL), SG_NULL_ARGUMENT);
        EXPECT(sg_gate_new(NULL, &h), SG_NULL_ARGUMENT);
        EXPECT(sg_gate_new(&cfg, NULL), SG_NULL_ARGUMENT);
        OK(sg_gate_new(&cfg, &h));
        sg_gate_free(h);
        sg_gate_free(NULL);
        CHECK(size > 0 && align > 0 && (align & (align - 1)) == 0);
        CHECK(posix_memalign(&mem, align < sizeof(void *) ? sizeof(void *) : align,
                             size + align) == 0);
        EXPECT(sg_gate_init(NULL, size, &cfg), SG_NULL_ARGUMENT);
        EXPECT(sg_gate_init(mem, size, NULL), SG_NULL_ARGUMENT);
        EXPECT(sg_gate_init(mem, size - 1, &cfg), SG_BUFFER_TOO_SMALL);
        EXPECT(sg_gate_init((char *)mem + 1, size, &cfg), SG_MISALIGNED);
        OK(sg_gate_init(mem, size, &cfg));
        h = (sg_gate *)mem;
        {
            uint32_t n = 99;
            OK(sg_gate_waiting_total(h, &n));
            CHECK(n == 0);
        }
        sg_gate_free(h); /* not a heap object: left alone */
        OK(sg_gate_deinit(h));
        EXPECT(sg_gate_deinit(h), SG_INVALID_HANDLE);
        {
            uint32_t n;
            EXPECT(sg_gate_waiting_total(h, &n), SG_INVALID_HANDLE);
        }
        OK(sg_gate_deinit(NULL));
        free(mem);
    }

    cfg.queue_capacity = 0;
    EXPECT(sg_gate_new(&cfg, &g), SG_CONFIG_OUT_OF_RANGE);
    cfg.queue_capacity = SG_GATE_MAX_QUEUE + 1;
    EXPECT(sg_gate_new(&cfg, &g), SG_CONFIG_OUT_OF_RANGE);
    cfg.queue_capacity = SG_GATE_MAX_QUEUE; /* the large queue builds */
    OK(sg_gate_new(&cfg, &g));
    sg_gate_free(g);
    g = NULL;
    OK(sg_gate_config_default(&cfg));
    cfg.codel_mode = 9;
    EXPECT(sg_gate_new(&cfg, &g), SG_CONFIG_OUT_OF_RANGE);
    cfg.codel_mode = SG_CODEL_RFC8289;
    OK(sg_gate_new(&cfg, &g));
    sg_gate_free(g);
    g = NULL;
    cfg.codel_target_ns = cfg.codel_interval_ns;
    EXPECT(sg_gate_new(&cfg, &g), SG_CONFIG_INCONSISTENT);
    OK(sg_gate_config_default(&cfg));
    cfg.lifo = 9;
    EXPECT(sg_gate_new(&cfg, &g), SG_CONFIG_OUT_OF_RANGE);
    cfg.lifo = SG_LIFO_OCCUPANCY;
    cfg.lifo_occupancy = NAN;
    EXPECT(sg_gate_new(&cfg, &g), SG_CONFIG_NOT_FINITE);
    cfg.lifo_occupancy = 0.8;
    OK(sg_gate_new(&cfg, &g));
    sg_gate_free(g);
    g = NULL;
    OK(sg_gate_config_default(&cfg));
    cfg.aging_enabled = true;
    OK(sg_gate_new(&cfg, &g)); /* the default aging: normal -> background after 500 ms */
    sg_gate_free(g);
    g = NULL;
    cfg.aging_from = 9;
    EXPECT(sg_gate_new(&cfg, &g), SG_CONFIG_OUT_OF_RANGE);
    cfg.aging_from = 2;
    cfg.aging_to = 1;
    EXPECT(sg_gate_new(&cfg, &g), SG_CONFIG_INCONSISTENT);
    OK(sg_gate_config_default(&cfg));
    cfg.service_alpha = 0.0;
    EXPECT(sg_gate_new(&cfg, &g), SG_CONFIG_OUT_OF_RANGE);
    cfg.service_alpha = NAN;
    EXPECT(sg_gate_new(&cfg, &g), SG_CONFIG_NOT_FINITE);
    OK(sg_gate_config_default(&cfg));
    cfg.fallback_retry_after_ns = 0;
    EXPECT(sg_gate_new(&cfg, &g), SG_CONFIG_OUT_OF_RANGE);
    OK(sg_gate_config_default(&cfg));
    cfg.limiter.levels = 0;
    EXPECT(sg_gate_new(&cfg, &g), SG_CONFIG_OUT_OF_RANGE);
    CHECK(g == NULL);
}

static void test_pump(void) {
    sg_gate_config cfg;
    sg_gate *g = NULL, *other = NULL;
    sg_permit first, second, p, zero;
    sg_gate_event ev[4];
    sg_rejection rej;
    sg_permit_info info;
    uint64_t ticket = 0, ticket2 = 0, wake = 0;
    size_t n = 99;
    uint32_t u = 0;
    double limit = 0;

    memset(&zero, 0, sizeof zero);
    memset(&second, 0, sizeof second); /* a move's target is read: not garbage */
    plain_config(&cfg, 1.0, 1, 8);
    OK(sg_gate_new(&cfg, &g));
    OK(sg_gate_new(&cfg, &other));

    /* Arguments. */
    EXPECT(sg_gate_arrive(NULL, 0, 0, SG_NO_DEADLINE, &p, &ticket, &rej), SG_NULL_ARGUMENT);
    EXPECT(sg_gate_arrive(g, 0, 0, SG_NO_DEADLINE, NULL, &ticket, &rej), SG_NULL_ARGUMENT);
    EXPECT(sg_gate_arrive(g, 0, 0, SG_NO_DEADLINE, &p, NULL, &rej), SG_NULL_ARGUMENT);
    EXPECT(sg_gate_arrive(g, 0, 8, SG_NO_DEADLINE, &p, &ticket, &rej), SG_INVALID_ARGUMENT);

    /* Admitted, then queued; nothing to grant until the slot frees. */
    OK(sg_gate_arrive(g, 1 * MS, SG_LEVEL_NORMAL, SG_NO_DEADLINE, &first, &ticket, NULL));
    OK(sg_permit_info_get(&first, &info));
    CHECK(info.kind == SG_PERMIT_KIND_GATE && info.started_at_ns == 1 * MS);
    EXPECT(sg_gate_arrive(g, 2 * MS, SG_LEVEL_NORMAL, SG_NO_DEADLINE, &p, &ticket, NULL),
           SG_QUEUED);
    OK(sg_gate_poll(g, 2 * MS, ev, 4, &n));
    CHECK(n == 0);
    OK(sg_gate_waiting(g, SG_LEVEL_NORMAL, &u));
    CHECK(u == 1);
    EXPECT(sg_gate_waiting(g, 8, &u), SG_INVALID_ARGUMENT);
    EXPECT(sg_gate_waiting(g, 0, NULL), SG_NULL_ARGUMENT);
    OK(sg_gate_waiting_total(g, &u));
    CHECK(u == 1);
    OK(sg_gate_next_wakeup(g, 2 * MS, &wake));
    CHECK(wake == SG_NEVER); /* no deadline, no maximum wait: only a release wakes it */

    /* Release errors change nothing. */
    EXPECT(sg_gate_release(g, &first, 3 * MS, 9), SG_INVALID_ARGUMENT);
    EXPECT(sg_gate_release(other, &first, 3 * MS, SG_OUTCOME_SUCCESS), SG_FOREIGN_HANDLE);
    EXPECT(sg_gate_release(g, &zero, 3 * MS, SG_OUTCOME_SUCCESS), SG_INVALID_HANDLE);
    EXPECT(sg_gate_release(g, NULL, 3 * MS, SG_OUTCOME_SUCCESS), SG_NULL_ARGUMENT);
    EXPECT(sg_gate_release(NULL, &first, 3 * MS, SG_OUTCOME_SUCCESS), SG_NULL_ARGUMENT);
    OK(sg_gate_poll(g, 3 * MS, ev, 4, &n));
    CHECK(n == 0);

    /* The release frees the slot; the next poll grants the waiter with a live permit. */
    OK(sg_gate_release(g, &first, 3 * MS, SG_OUTCOME_SUCCESS));
    EXPECT(sg_gate_release(g, &first, 3 * MS, SG_OUTCOME_SUCCESS), SG_ALREADY_RELEASED);
    OK(sg_gate_poll(g, 3 * MS, ev, 4, &n));
    CHECK(n == 1);
    CHECK(ev[0].kind == SG_EVENT_GRANTED && ev[0].ticket == ticket);
    OK(sg_permit_move(&ev[0].permit, &second));
    OK(sg_gate_service_ns(g, &wake));
    CHECK(wake == 2 * MS); /* the first success's latency */
    EXPECT(sg_gate_cancel(g, ticket), SG_UNKNOWN_TICKET); /* already granted */

    /* Poll arguments. */
    EXPECT(sg_gate_poll(g, 3 * MS, NULL, 4, &n), SG_NULL_ARGUMENT);
    EXPECT(sg_gate_poll(g, 3 * MS, ev, 4, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_gate_poll(NULL, 3 * MS, ev, 4, &n), SG_NULL_ARGUMENT);
    OK(sg_gate_poll(g, 3 * MS, NULL, 0, &n));
    CHECK(n == 0);

    /* Cancel: a queued ticket, then the same again, then a ticket of another gate. */
    EXPECT(sg_gate_arrive(g, 4 * MS, 0, SG_NO_DEADLINE, &p, &ticket2, NULL), SG_QUEUED);
    EXPECT(sg_gate_cancel(other, ticket2), SG_FOREIGN_HANDLE);
    OK(sg_gate_cancel(g, ticket2));
    EXPECT(sg_gate_cancel(g, ticket2), SG_UNKNOWN_TICKET);
    EXPECT(sg_gate_cancel(NULL, ticket2), SG_NULL_ARGUMENT);
    OK(sg_gate_poll(g, 4 * MS, ev, 4, &n));
    CHECK(n == 0); /* a cancelled ticket gets no event */

    /* A deadline already past, or unmeetable at the drain rate. */
    EXPECT(sg_gate_arrive(g, 5 * MS, 0, 5 * MS, &p, &ticket2, &rej), SG_REJECTED);
    CHECK(rej.reason == SG_REASON_DEADLINE_UNMEETABLE && rej.retry_after_ns > 0);
    EXPECT(sg_gate_arrive(g, 5 * MS, 0, 5 * MS + 1, &p, &ticket2, &rej), SG_REJECTED);
    CHECK(rej.reason == SG_REASON_DEADLINE_UNMEETABLE); /* service time is 2 ms */

    /* The shed switch. */
    OK(sg_gate_shed_level(g, &u));
    CHECK(u == SG_NO_LEVEL);
    OK(sg_gate_state(g, &u));
    CHECK(u == SG_GATE_HEALTHY);
    OK(sg_gate_set_shed_level(g, 0));
    EXPECT(sg_gate_set_shed_level(g, 8), SG_INVALID_ARGUMENT);
    EXPECT(sg_gate_set_shed_level(NULL, 0), SG_NULL_ARGUMENT);
    OK(sg_gate_shed_level(g, &u));
    CHECK(u == 0);
    OK(sg_gate_state(g, &u));
    CHECK(u == SG_GATE_OVERLOADED);
    EXPECT(sg_gate_arrive(g, 6 * MS, 0, SG_NO_DEADLINE, &p, &ticket2, &rej), SG_REJECTED);
    CHECK(rej.reason == SG_REASON_SHED && rej.retry_after_ns == SEC);
    OK(sg_gate_clear_shed_level(g));
    EXPECT(sg_gate_clear_shed_level(NULL), SG_NULL_ARGUMENT);
    OK(sg_gate_shed_level(g, &u));
    CHECK(u == SG_NO_LEVEL);
    EXPECT(sg_gate_state(g, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_gate_shed_level(NULL, &u), SG_NULL_ARGUMENT);

    /* The kill switch of the gate's limiter. */
    OK(sg_gate_limit(g, &limit));
    CHECK(limit == 1.0);
    EXPECT(sg_gate_set_static_limit(g, NAN), SG_INVALID_ARGUMENT);
    EXPECT(sg_gate_set_static_limit(g, 0.0), SG_INVALID_ARGUMENT);
    OK(sg_gate_set_static_limit(g, 3.0));
    OK(sg_gate_limit(g, &limit));
    CHECK(limit == 3.0);
    OK(sg_gate_clear_static_limit(g));
    EXPECT(sg_gate_clear_static_limit(NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_gate_limit(g, NULL), SG_NULL_ARGUMENT);

    /* A limiter's permit is foreign to a gate. */
    {
        sg_limiter_config lc;
        sg_limiter *l = NULL;
        sg_permit lp;
        OK(sg_limiter_config_default(&lc));
        OK(sg_limiter_new(&lc, &l));
        OK(sg_limiter_try_acquire(l, 1, 0, &lp, NULL));
        EXPECT(sg_gate_release(g, &lp, 2, SG_OUTCOME_SUCCESS), SG_FOREIGN_HANDLE);
        OK(sg_limiter_release(l, &lp, 2, SG_OUTCOME_SUCCESS));
        sg_limiter_free(l);
    }

    OK(sg_gate_release(g, &second, 7 * MS, SG_OUTCOME_IGNORED));
    {
        sg_gate_metrics m;
        OK(sg_gate_metrics_get(g, &m));
        CHECK(m.granted == 1 && m.cancelled == 1 && m.queued == 2 && m.waiting == 0);
        CHECK(m.deadline_unmeetable == 2 && m.shed == 1 && m.capacity == 8);
        CHECK(m.shed_level == SG_NO_LEVEL && m.state == SG_GATE_HEALTHY);
        CHECK(m.limiter.inflight == 0 && m.limiter.admitted == 2);
        CHECK(strcmp(m.limiter.algorithm, "fixed") == 0);
        EXPECT(sg_gate_metrics_get(g, NULL), SG_NULL_ARGUMENT);
        EXPECT(sg_gate_metrics_get(NULL, &m), SG_NULL_ARGUMENT);
    }
    EXPECT(sg_gate_next_wakeup(g, 0, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_gate_waiting_total(g, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_gate_service_ns(g, NULL), SG_NULL_ARGUMENT);
    sg_gate_free(g);
    sg_gate_free(other);
}

static void test_expiry_and_eviction(void) {
    sg_gate_config cfg;
    sg_gate *g = NULL;
    sg_permit held, p;
    sg_gate_event ev[4];
    sg_rejection rej;
    uint64_t t_low = 0, t_high = 0, wake = 0;
    size_t n = 0;

    /* Maximum wait: the waiter expires, and next_wakeup says when to look. */
    plain_config(&cfg, 1.0, 1, 4);
    cfg.max_wait_ns = 10 * MS;
    OK(sg_gate_new(&cfg, &g));
    OK(sg_gate_arrive(g, 0, 0, SG_NO_DEADLINE, &held, &t_low, NULL));
    EXPECT(sg_gate_arrive(g, 1 * MS, 0, SG_NO_DEADLINE, &p, &t_low, NULL), SG_QUEUED);
    OK(sg_gate_next_wakeup(g, 1 * MS, &wake));
    CHECK(wake > 1 * MS && wake <= 11 * MS + 1);
    OK(sg_gate_poll(g, wake, ev, 4, &n));
    CHECK(n == 1 && ev[0].kind == SG_EVENT_EXPIRED && ev[0].ticket == t_low);
    CHECK(ev[0].rejection.reason == SG_REASON_EXPIRED);
    EXPECT(sg_permit_is_live(&ev[0].permit, NULL), SG_NULL_ARGUMENT);
    {
        bool live = true;
        EXPECT(sg_permit_is_live(&ev[0].permit, &live), SG_INVALID_HANDLE); /* zeroed */
    }
    OK(sg_gate_release(g, &held, 20 * MS, SG_OUTCOME_SUCCESS));
    sg_gate_free(g);
    g = NULL;

    /* A full queue: a more important arrival evicts a less important waiter; an equally
     * important one is refused. */
    plain_config(&cfg, 1.0, 3, 1);
    OK(sg_gate_new(&cfg, &g));
    OK(sg_gate_arrive(g, 0, SG_LEVEL_NORMAL, SG_NO_DEADLINE, &held, &t_low, NULL));
    EXPECT(sg_gate_arrive(g, 1, SG_LEVEL_BACKGROUND, SG_NO_DEADLINE, &p, &t_low, NULL),
           SG_QUEUED);
    EXPECT(sg_gate_arrive(g, 2, SG_LEVEL_BACKGROUND, SG_NO_DEADLINE, &p, &t_high, &rej),
           SG_REJECTED);
    CHECK(rej.reason == SG_REASON_QUEUE_FULL);
    EXPECT(sg_gate_arrive(g, 3, SG_LEVEL_CRITICAL, SG_NO_DEADLINE, &p, &t_high, NULL), SG_QUEUED);
    OK(sg_gate_poll(g, 4, ev, 4, &n));
    CHECK(n == 1 && ev[0].kind == SG_EVENT_EXPIRED && ev[0].ticket == t_low);
    CHECK(ev[0].rejection.reason == SG_REASON_EVICTED);
    OK(sg_gate_release(g, &held, 5, SG_OUTCOME_SUCCESS));
    OK(sg_gate_poll(g, 5, ev, 4, &n));
    CHECK(n == 1 && ev[0].kind == SG_EVENT_GRANTED && ev[0].ticket == t_high);
    OK(sg_gate_release(g, &ev[0].permit, 6, SG_OUTCOME_SUCCESS));
    sg_gate_free(g);
}

/* The brownout dimmer: 0 when idle, rises with the queue's occupancy before anything is
 * refused, falls back slowly; bad input writes nothing. */
static void test_brownout(void) {
    sg_gate_config cfg;
    sg_gate *g = NULL;
    sg_permit held, p;
    sg_gate_event ev[16];
    uint64_t t = 0;
    size_t n = 0;
    double d = -1.0, prev = 0.0;
    int i;

    plain_config(&cfg, 1.0, 1, 10);
    OK(sg_gate_new(&cfg, &g));
    OK(sg_gate_brownout(g, 0, &d));
    CHECK(d == 0.0);
    OK(sg_gate_arrive(g, 1 * SEC, 0, SG_NO_DEADLINE, &held, &t, NULL));
    /* Waiters 1..8 of 10: 0 up to a fifth of the queue, then rising to 1 at 8 of 10. */
    for (i = 1; i <= 8; i++) {
        EXPECT(sg_gate_arrive(g, 1 * SEC + (uint64_t)i, 0, SG_NO_DEADLINE, &p, &t, NULL), SG_QUEUED);
        OK(sg_gate_brownout(g, 1 * SEC + (uint64_t)i, &d));
        CHECK(d >= 0.0 && d <= 1.0 && d >= prev);
        if (i <= 2) CHECK(d == 0.0);
        if (i > 2) CHECK(d > 0.0);
        prev = d;
    }
    CHECK(d == 1.0);
    /* Nothing refused so far. */
    {
        sg_gate_metrics m;
        OK(sg_gate_metrics_get(g, &m));
        CHECK(m.queue_full == 0 && m.expired == 0 && m.shed == 0);
    }
    /* Drain: every waiter granted and released at once. */
    OK(sg_gate_release(g, &held, 2 * SEC, SG_OUTCOME_SUCCESS));
    for (i = 0; i < 8; i++) {
        OK(sg_gate_poll(g, 2 * SEC, ev, 16, &n));
        CHECK(n == 1 && ev[0].kind == SG_EVENT_GRANTED);
        OK(sg_gate_release(g, &ev[0].permit, 2 * SEC, SG_OUTCOME_SUCCESS));
    }
    /* Falls by at most 1/2 per second. */
    OK(sg_gate_brownout(g, 2 * SEC, &d));
    CHECK(d > 0.0 && d < 1.0);
    OK(sg_gate_brownout(g, 4 * SEC, &d));
    CHECK(d == 0.0);

    /* Bad input: nothing written. */
    d = -1.0;
    EXPECT(sg_gate_brownout(g, SG_MAX_NOW + 1, &d), SG_TIME_OUT_OF_RANGE);
    EXPECT(sg_gate_brownout(g, 5 * SEC, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_gate_brownout(NULL, 5 * SEC, &d), SG_NULL_ARGUMENT);
    EXPECT(sg_gate_brownout((const sg_gate *)&cfg, 5 * SEC, &d), SG_INVALID_HANDLE);
    CHECK(d == -1.0);
    sg_gate_free(g);
}

/* Cancelling a ticket this gate never issued changes nothing and says so with one of
 * the two statuses the header documents for it. */
static void test_cancel_of_an_unknown_ticket(void) {
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

int main(void) {
    test_configs();
    test_pump();
    test_expiry_and_eviction();
    test_brownout();
    test_cancel_of_an_unknown_ticket();
    test_pump_acts_on_due_wakeup();
    return SUMMARY("gate");
}
