/* Calls every function of the C ABI and checks every error status it can give: NULL
 * arguments, out-of-range numbers, bad configs, misused permits and handles. Each misuse
 * is also checked to change nothing. Compiled as C11 and as C++17, against the static and
 * the shared library, and run under valgrind by tests/c/run.sh. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define MS SG_MS
#define SEC SG_SEC

/* Every object type's life cycle and the errors of each step. `T` is the type name
 * without `sg_`, `cfg` a valid config variable. */
#define LIFECYCLE(T, cfg)                                                                  \
    do {                                                                                   \
        sg_##T *h_ = NULL;                                                                 \
        void *mem_ = NULL;                                                                 \
        size_t size_ = sg_##T##_size(), align_ = sg_##T##_align();                         \
        EXPECT(sg_##T##_config_default(NULL), SG_NULL_ARGUMENT);                           \
        EXPECT(sg_##T##_new(NULL, &h_), SG_NULL_ARGUMENT);                                 \
        EXPECT(sg_##T##_new(&(cfg), NULL), SG_NULL_ARGUMENT);                              \
        CHECK(h_ == NULL);                                                                 \
        OK(sg_##T##_new(&(cfg), &h_));                                                     \
        CHECK(h_ != NULL);                                                                 \
        sg_##T##_free(h_);                                                                 \
        sg_##T##_free(NULL);                                                               \
        CHECK(size_ > 0 && align_ > 0 && (align_ & (align_ - 1)) == 0);                    \
        CHECK(posix_memalign(&mem_, align_ < sizeof(void *) ? sizeof(void *) : align_,     \
                             size_ + align_) == 0);                                        \
        EXPECT(sg_##T##_init(NULL, size_, &(cfg)), SG_NULL_ARGUMENT);                      \
        EXPECT(sg_##T##_init(mem_, size_, NULL), SG_NULL_ARGUMENT);                        \
        EXPECT(sg_##T##_init(mem_, size_ - 1, &(cfg)), SG_BUFFER_TOO_SMALL);               \
        if (align_ > 1) {                                                                  \
            EXPECT(sg_##T##_init((char *)mem_ + 1, size_, &(cfg)), SG_MISALIGNED);         \
        }                                                                                  \
        OK(sg_##T##_init(mem_, size_, &(cfg)));                                            \
        sg_##T##_free((sg_##T *)mem_); /* not a heap object: left alone */                 \
        OK(sg_##T##_deinit((sg_##T *)mem_));                                               \
        EXPECT(sg_##T##_deinit((sg_##T *)mem_), SG_INVALID_HANDLE);                        \
        OK(sg_##T##_deinit(NULL));                                                         \
        free(mem_);                                                                        \
    } while (0)

static void fixed_limiter(sg_limiter_config *cfg, double limit) {
    OK(sg_limiter_config_default(cfg));
    cfg->algorithm = SG_ALGORITHM_FIXED;
    cfg->fixed.initial_limit = limit;
    cfg->fixed.min_limit = limit < 1.0 ? limit : 1.0;
    cfg->fixed.max_limit = limit < 1.0 ? 1.0 : limit;
    cfg->levels = 1;
}

static void test_strings_and_time(void) {
    uint64_t ns = 0;
    CHECK(strcmp(sg_status_str(SG_OK), "ok") == 0);
    CHECK(strcmp(sg_status_str(SG_REJECTED), "rejected") == 0);
    CHECK(strcmp(sg_status_str(12345), "unknown status") == 0);
    CHECK(strcmp(sg_reason_str(SG_REASON_LIMIT_REACHED), "limit_reached") == 0);
    CHECK(strcmp(sg_reason_str(SG_REASON_NO_CREDIT), "no_credit") == 0);
    CHECK(strcmp(sg_reason_str(0), "unknown") == 0);
    CHECK(strcmp(sg_version(), SURGEGUARD_VERSION_STRING) == 0);
    CHECK(sg_version_number() == (uint32_t)SURGEGUARD_VERSION_NUMBER);
    CHECK(sg_clock_now_ns() > 0);
    CHECK(sg_clock_now_ns() <= sg_clock_now_ns());

    OK(sg_secs_to_ns(1.5, &ns));
    CHECK(ns == 1500000000u);
    ns = 7;
    EXPECT(sg_secs_to_ns(NAN, &ns), SG_INVALID_ARGUMENT);
    EXPECT(sg_secs_to_ns(-0.5, &ns), SG_INVALID_ARGUMENT);
    EXPECT(sg_secs_to_ns(INFINITY, &ns), SG_INVALID_ARGUMENT);
    EXPECT(sg_secs_to_ns(1e12, &ns), SG_INVALID_ARGUMENT);
    EXPECT(sg_secs_to_ns(1.0, NULL), SG_NULL_ARGUMENT);
    CHECK(ns == 7); /* nothing written on failure */
}

static void test_limiter_configs(void) {
    sg_limiter_config cfg;
    sg_limiter *l = NULL;
    sg_fixed_config fixed;
    sg_aimd_config aimd;
    sg_hysteresis_config hyst;
    sg_gradient_config grad;
    sg_gradient2_config grad2;
    sg_vegas_config vegas;
    uint32_t a;

    OK(sg_fixed_config_default(&fixed));
    OK(sg_aimd_config_default(&aimd));
    OK(sg_hysteresis_config_default(&hyst));
    OK(sg_gradient_config_default(&grad));
    OK(sg_gradient2_config_default(&grad2));
    OK(sg_vegas_config_default(&vegas));
    EXPECT(sg_fixed_config_default(NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_aimd_config_default(NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_hysteresis_config_default(NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_gradient_config_default(NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_gradient2_config_default(NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_vegas_config_default(NULL), SG_NULL_ARGUMENT);
    CHECK(fixed.initial_limit >= fixed.min_limit && fixed.initial_limit <= fixed.max_limit);

    OK(sg_limiter_config_default(&cfg));
    CHECK(cfg.algorithm == SG_ALGORITHM_GRADIENT);
    CHECK(cfg.levels == 3);
    CHECK(cfg.weights[0] == 0.7 && cfg.weights[1] == 0.25 && cfg.weights[2] == 0.05);
    /* Every algorithm builds with its defaults. */
    for (a = SG_ALGORITHM_FIXED; a <= SG_ALGORITHM_VEGAS; a++) {
        sg_limiter_metrics m;
        cfg.algorithm = a;
        OK(sg_limiter_new(&cfg, &l));
        OK(sg_limiter_metrics_get(l, &m));
        CHECK(m.algorithm != NULL && strcmp(m.algorithm, "unknown") != 0);
        sg_limiter_free(l);
        l = NULL;
    }

    /* Bad configs: a status per kind of mistake, and no handle written. */
    OK(sg_limiter_config_default(&cfg));
    cfg.algorithm = 99;
    EXPECT(sg_limiter_new(&cfg, &l), SG_CONFIG_OUT_OF_RANGE);
    OK(sg_limiter_config_default(&cfg));
    cfg.levels = 0;
    EXPECT(sg_limiter_new(&cfg, &l), SG_CONFIG_OUT_OF_RANGE);
    cfg.levels = 9;
    EXPECT(sg_limiter_new(&cfg, &l), SG_CONFIG_OUT_OF_RANGE);
    cfg.levels = 256 + 3; /* would wrap to 3 in a careless cast */
    EXPECT(sg_limiter_new(&cfg, &l), SG_CONFIG_OUT_OF_RANGE);
    OK(sg_limiter_config_default(&cfg));
    cfg.weights[1] = NAN;
    EXPECT(sg_limiter_new(&cfg, &l), SG_CONFIG_NOT_FINITE);
    cfg.weights[1] = -0.1;
    EXPECT(sg_limiter_new(&cfg, &l), SG_CONFIG_OUT_OF_RANGE);
    cfg.weights[1] = 0.9; /* sum above 1 */
    EXPECT(sg_limiter_new(&cfg, &l), SG_CONFIG_INCONSISTENT);
    OK(sg_limiter_config_default(&cfg));
    cfg.min_window_ns = 2 * SEC;
    cfg.max_window_ns = 1 * SEC;
    EXPECT(sg_limiter_new(&cfg, &l), SG_CONFIG_INCONSISTENT);
    fixed_limiter(&cfg, 4.0);
    cfg.fixed.min_limit = 10.0;
    EXPECT(sg_limiter_new(&cfg, &l), SG_CONFIG_INCONSISTENT);
    fixed_limiter(&cfg, 4.0);
    cfg.fixed.initial_limit = INFINITY;
    EXPECT(sg_limiter_new(&cfg, &l), SG_CONFIG_NOT_FINITE);
    CHECK(l == NULL);
}

static void test_limiter(void) {
    sg_limiter_config cfg;
    sg_limiter *a = NULL, *b = NULL;
    sg_permit p1, p2, p3, moved;
    sg_permit zero;
    sg_rejection rej;
    sg_permit_info info;
    sg_limiter_metrics m;
    uint32_t n = 0;
    double limit = 0;
    bool live = false;

    memset(&zero, 0, sizeof zero);
    memset(&moved, 0, sizeof moved); /* a move's target is read: not garbage */
    fixed_limiter(&cfg, 2.0);
    LIFECYCLE(limiter, cfg);
    OK(sg_limiter_new(&cfg, &a));
    OK(sg_limiter_new(&cfg, &b));

    /* Arguments. */
    EXPECT(sg_limiter_try_acquire(NULL, 1, 0, &p1, &rej), SG_NULL_ARGUMENT);
    EXPECT(sg_limiter_try_acquire(a, 1, 0, NULL, &rej), SG_NULL_ARGUMENT);
    EXPECT(sg_limiter_try_acquire(a, 1, SG_MAX_LEVELS, &p1, &rej), SG_INVALID_ARGUMENT);
    EXPECT(sg_limiter_try_acquire(a, 1, UINT32_MAX, &p1, &rej), SG_INVALID_ARGUMENT);
    EXPECT(sg_limiter_try_acquire((sg_limiter *)&zero, 1, 0, &p1, &rej), SG_INVALID_HANDLE);
    OK(sg_limiter_inflight(a, &n));
    CHECK(n == 0);

    /* Two admissions, then a rejection with its reason and hint. */
    OK(sg_limiter_try_acquire(a, 1 * MS, SG_LEVEL_NORMAL, &p1, &rej));
    OK(sg_limiter_try_acquire(a, 1 * MS, SG_LEVEL_NORMAL, &p2, NULL));
    memset(&rej, 0, sizeof rej);
    EXPECT(sg_limiter_try_acquire(a, 1 * MS, SG_LEVEL_NORMAL, &p3, &rej), SG_REJECTED);
    CHECK(rej.reason == SG_REASON_LIMIT_REACHED);
    CHECK(rej.retry_after_ns > 0);
    EXPECT(sg_limiter_try_acquire(a, 1 * MS, SG_LEVEL_NORMAL, &p3, NULL), SG_REJECTED);
    OK(sg_limiter_inflight(a, &n));
    CHECK(n == 2);
    OK(sg_limiter_inflight_of(a, SG_LEVEL_NORMAL, &n));
    CHECK(n == 2);
    EXPECT(sg_limiter_inflight_of(a, 8, &n), SG_INVALID_ARGUMENT);
    EXPECT(sg_limiter_inflight_of(a, 0, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_limiter_inflight(NULL, &n), SG_NULL_ARGUMENT);
    EXPECT(sg_limiter_inflight(a, NULL), SG_NULL_ARGUMENT);

    /* Permit introspection and moves. */
    OK(sg_permit_info_get(&p1, &info));
    CHECK(info.kind == SG_PERMIT_KIND_LIMITER);
    CHECK(info.started_at_ns == 1 * MS);
    CHECK(info.level == 0); /* one level configured: everything is level 0 */
    EXPECT(sg_permit_info_get(NULL, &info), SG_NULL_ARGUMENT);
    EXPECT(sg_permit_info_get(&p1, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_permit_info_get(&zero, &info), SG_INVALID_HANDLE);
    OK(sg_permit_is_live(&p1, &live));
    CHECK(live);
    EXPECT(sg_permit_is_live(&zero, &live), SG_INVALID_HANDLE);
    EXPECT(sg_permit_is_live(NULL, &live), SG_NULL_ARGUMENT);
    EXPECT(sg_permit_is_live(&p1, NULL), SG_NULL_ARGUMENT);
    OK(sg_permit_move(&p2, &moved));
    OK(sg_permit_is_live(&p2, &live));
    CHECK(!live);
    EXPECT(sg_permit_move(&p2, &moved), SG_ALREADY_RELEASED); /* moved away already */
    EXPECT(sg_permit_move(&moved, &moved), SG_INVALID_ARGUMENT);
    EXPECT(sg_permit_move(NULL, &p3), SG_NULL_ARGUMENT);
    EXPECT(sg_permit_move(&moved, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_permit_move(&zero, &p3), SG_INVALID_HANDLE);

    /* Release: bad outcome, foreign limiter, double release, zeroed storage. Each leaves
     * the count alone. */
    EXPECT(sg_limiter_release(a, &p1, 2 * MS, 3), SG_INVALID_ARGUMENT);
    EXPECT(sg_limiter_release(b, &p1, 2 * MS, SG_OUTCOME_SUCCESS), SG_FOREIGN_HANDLE);
    EXPECT(sg_limiter_release(a, &zero, 2 * MS, SG_OUTCOME_SUCCESS), SG_INVALID_HANDLE);
    EXPECT(sg_limiter_release(a, NULL, 2 * MS, SG_OUTCOME_SUCCESS), SG_NULL_ARGUMENT);
    EXPECT(sg_limiter_release(NULL, &p1, 2 * MS, SG_OUTCOME_SUCCESS), SG_NULL_ARGUMENT);
    EXPECT(sg_limiter_release(a, &p2, 2 * MS, SG_OUTCOME_SUCCESS), SG_ALREADY_RELEASED);
    OK(sg_limiter_inflight(a, &n));
    CHECK(n == 2);
    OK(sg_limiter_inflight(b, &n));
    CHECK(n == 0);
    OK(sg_limiter_release(a, &p1, 3 * MS, SG_OUTCOME_SUCCESS));
    EXPECT(sg_limiter_release(a, &p1, 3 * MS, SG_OUTCOME_SUCCESS), SG_ALREADY_RELEASED);
    OK(sg_limiter_release(a, &moved, 3 * MS, SG_OUTCOME_DROPPED));
    OK(sg_limiter_inflight(a, &n));
    CHECK(n == 0);
    /* Released storage can be reused. */
    OK(sg_limiter_try_acquire(a, 4 * MS, SG_LEVEL_NORMAL, &p1, NULL));
    OK(sg_limiter_release(a, &p1, 5 * MS, SG_OUTCOME_IGNORED));

    /* The kill switch. */
    EXPECT(sg_limiter_set_static_limit(a, NAN), SG_INVALID_ARGUMENT);
    EXPECT(sg_limiter_set_static_limit(a, -1.0), SG_INVALID_ARGUMENT);
    EXPECT(sg_limiter_set_static_limit(a, 1e12), SG_INVALID_ARGUMENT);
    EXPECT(sg_limiter_set_static_limit(NULL, 3.0), SG_NULL_ARGUMENT);
    OK(sg_limiter_limit(a, &limit));
    CHECK(limit == 2.0);
    OK(sg_limiter_set_static_limit(a, 5.0));
    OK(sg_limiter_limit(a, &limit));
    CHECK(limit == 5.0);
    OK(sg_limiter_metrics_get(a, &m));
    CHECK(m.has_static_limit && m.static_limit == 5.0);
    OK(sg_limiter_clear_static_limit(a));
    EXPECT(sg_limiter_clear_static_limit(NULL), SG_NULL_ARGUMENT);
    OK(sg_limiter_limit(a, &limit));
    CHECK(limit == 2.0);
    EXPECT(sg_limiter_limit(a, NULL), SG_NULL_ARGUMENT);

    OK(sg_limiter_note_arrival(a, 6 * MS, SG_LEVEL_CRITICAL));
    EXPECT(sg_limiter_note_arrival(a, 6 * MS, 8), SG_INVALID_ARGUMENT);
    EXPECT(sg_limiter_note_arrival(NULL, 6 * MS, 0), SG_NULL_ARGUMENT);

    OK(sg_limiter_metrics_get(a, &m));
    CHECK(strcmp(m.algorithm, "fixed") == 0);
    CHECK(m.admitted == 3 && m.successes == 1 && m.drops == 1 && m.ignored == 1);
    CHECK(m.rejected == 2 && m.inflight == 0 && m.levels == 1);
    EXPECT(sg_limiter_metrics_get(a, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_limiter_metrics_get(NULL, &m), SG_NULL_ARGUMENT);

    /* A handle of another type is refused. */
    {
        sg_credits_config cc;
        sg_credits *c = NULL;
        OK(sg_credits_config_default(&cc));
        OK(sg_credits_new(&cc, &c));
        EXPECT(sg_limiter_inflight((sg_limiter *)c, &n), SG_INVALID_HANDLE);
        sg_credits_free(c);
    }
    sg_limiter_free(a);
    sg_limiter_free(b);

    /* In caller storage: works, and a deinitialised handle is refused. */
    {
        void *mem = NULL;
        sg_limiter *l;
        CHECK(posix_memalign(&mem, sg_limiter_align(), sg_limiter_size()) == 0);
        OK(sg_limiter_init(mem, sg_limiter_size(), &cfg));
        l = (sg_limiter *)mem;
        OK(sg_limiter_try_acquire(l, 1, 0, &p1, NULL));
        OK(sg_limiter_release(l, &p1, 2, SG_OUTCOME_SUCCESS));
        OK(sg_limiter_deinit(l));
        EXPECT(sg_limiter_try_acquire(l, 1, 0, &p1, NULL), SG_INVALID_HANDLE);
        free(mem);
    }
}

static void test_credits(void) {
    sg_credits_config cfg;
    sg_credits *c = NULL;
    sg_rejection rej;
    sg_credits_metrics m;
    uint32_t v = 0;
    bool stalled = false;

    OK(sg_credits_config_default(&cfg));
    CHECK(cfg.capacity == 256 && cfg.low_water == 64);
    cfg.capacity = 4;
    cfg.low_water = 1;
    LIFECYCLE(credits, cfg);
    cfg.capacity = 0;
    EXPECT(sg_credits_new(&cfg, &c), SG_CONFIG_OUT_OF_RANGE);
    cfg.capacity = 4;
    cfg.low_water = 4;
    EXPECT(sg_credits_new(&cfg, &c), SG_CONFIG_INCONSISTENT);
    cfg.low_water = 1;
    OK(sg_credits_new(&cfg, &c));

    OK(sg_credits_is_stalled(c, &stalled));
    CHECK(stalled);
    EXPECT(sg_credits_try_take(c, 1, &rej), SG_REJECTED);
    CHECK(rej.reason == SG_REASON_NO_CREDIT && rej.retry_after_ns == 0);
    OK(sg_credits_grant_due(c, &v));
    CHECK(v == 4);
    OK(sg_credits_replenish(c, &v));
    CHECK(v == 4);
    OK(sg_credits_try_take(c, 3, NULL));
    OK(sg_credits_take_up_to(c, 5, &v));
    CHECK(v == 1);
    EXPECT(sg_credits_complete(c, 5), SG_ALREADY_RELEASED);
    OK(sg_credits_buffered(c, &v));
    CHECK(v == 4);
    OK(sg_credits_complete(c, 3));
    OK(sg_credits_outstanding(c, &v));
    CHECK(v == 1);
    OK(sg_credits_grant(c, 10, &v));
    CHECK(v == 3);
    OK(sg_credits_available(c, &v));
    CHECK(v == 3);
    OK(sg_credits_metrics_get(c, &m));
    CHECK(m.granted == 7 && m.taken == 4 && m.completed == 3 && m.refused == 1);
    CHECK(m.capacity == 4);

    EXPECT(sg_credits_try_take(NULL, 1, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_credits_take_up_to(c, 1, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_credits_complete(NULL, 1), SG_NULL_ARGUMENT);
    EXPECT(sg_credits_grant(c, 1, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_credits_replenish(NULL, &v), SG_NULL_ARGUMENT);
    EXPECT(sg_credits_grant_due(c, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_credits_available(NULL, &v), SG_NULL_ARGUMENT);
    EXPECT(sg_credits_buffered(c, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_credits_outstanding(NULL, &v), SG_NULL_ARGUMENT);
    EXPECT(sg_credits_is_stalled(c, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_credits_metrics_get(c, NULL), SG_NULL_ARGUMENT);
    sg_credits_free(c);
}

static void test_lag_meter(void) {
    sg_lag_meter_config cfg;
    sg_lag_meter *m = NULL;
    sg_lag_metrics lm;
    uint64_t v = 0, s;
    bool exceeds = false;

    OK(sg_lag_meter_config_default(&cfg));
    CHECK(cfg.bucket_ns == SEC);
    LIFECYCLE(lag_meter, cfg);
    cfg.bucket_ns = 0;
    EXPECT(sg_lag_meter_new(&cfg, &m), SG_CONFIG_OUT_OF_RANGE);
    cfg.bucket_ns = SEC;
    OK(sg_lag_meter_new(&cfg, &m));

    /* A 1 h backlog at 1000/s, consumed at 1200/s (20 % headroom). */
    OK(sg_lag_meter_observe_totals(m, 0, 3600000, 0));
    OK(sg_lag_meter_time_to_drain(m, 0, &v));
    CHECK(v == SG_NEVER); /* rates not known yet */
    for (s = 1; s <= 60; s++) {
        OK(sg_lag_meter_observe_totals(m, s * SEC, 3600000 + 1000 * s, 1200 * s));
    }
    OK(sg_lag_meter_lag(m, 61 * SEC, &v));
    CHECK(v == 3588000);
    OK(sg_lag_meter_lag_time(m, 61 * SEC, &v));
    CHECK(v == 2990 * SEC);
    OK(sg_lag_meter_time_to_drain(m, 61 * SEC, &v));
    CHECK(v == 17940 * SEC);
    OK(sg_lag_meter_time_to_drain_exceeds(m, 61 * SEC, 4 * 3600 * SEC, &exceeds));
    CHECK(exceeds);
    OK(sg_lag_meter_record_produced(m, 61 * SEC, 10));
    OK(sg_lag_meter_record_consumed(m, 61 * SEC, 10));
    OK(sg_lag_meter_report_oldest(m, 61 * SEC, 60 * SEC));
    OK(sg_lag_meter_metrics_get(m, 61 * SEC, &lm));
    CHECK(lm.rates_known && lm.consume_rate == 1200.0);
    CHECK(lm.has_oldest_age && lm.oldest_age_ns == SEC);
    OK(sg_lag_meter_clear_oldest(m, 61 * SEC));
    OK(sg_lag_meter_metrics_get(m, 61 * SEC, &lm));
    CHECK(!lm.has_oldest_age);

    EXPECT(sg_lag_meter_record_produced(NULL, 0, 1), SG_NULL_ARGUMENT);
    EXPECT(sg_lag_meter_record_consumed(NULL, 0, 1), SG_NULL_ARGUMENT);
    EXPECT(sg_lag_meter_observe_totals(NULL, 0, 1, 1), SG_NULL_ARGUMENT);
    EXPECT(sg_lag_meter_report_oldest(NULL, 0, 1), SG_NULL_ARGUMENT);
    EXPECT(sg_lag_meter_clear_oldest(NULL, 0), SG_NULL_ARGUMENT);
    EXPECT(sg_lag_meter_lag(m, 0, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_lag_meter_lag_time(m, 0, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_lag_meter_time_to_drain(m, 0, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_lag_meter_time_to_drain_exceeds(m, 0, 1, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_lag_meter_metrics_get(m, 0, NULL), SG_NULL_ARGUMENT);
    sg_lag_meter_free(m);
}

static void test_watermarks(void) {
    sg_watermarks_config cfg;
    sg_watermarks *w = NULL;
    sg_watermarks_metrics m;
    uint32_t t = 99;
    bool paused = false;

    OK(sg_watermarks_config_default(&cfg));
    CHECK(cfg.capacity == 400 && cfg.pause_below == 100 && cfg.resume_above == 200);
    LIFECYCLE(watermarks, cfg);
    cfg.pause_below = 0;
    EXPECT(sg_watermarks_new(&cfg, &w), SG_CONFIG_OUT_OF_RANGE);
    cfg.pause_below = 300;
    EXPECT(sg_watermarks_new(&cfg, &w), SG_CONFIG_INCONSISTENT);
    OK(sg_watermarks_config_default(&cfg));
    OK(sg_watermarks_new(&cfg, &w));
    OK(sg_watermarks_observe(w, 0, 250, &t));
    CHECK(t == SG_TRANSITION_NONE);
    OK(sg_watermarks_observe(w, 1, 301, &t));
    CHECK(t == SG_TRANSITION_PAUSE);
    OK(sg_watermarks_observe(w, 2, 250, &t));
    CHECK(t == SG_TRANSITION_NONE);
    OK(sg_watermarks_is_paused(w, &paused));
    CHECK(paused);
    OK(sg_watermarks_observe(w, 3, 199, &t));
    CHECK(t == SG_TRANSITION_RESUME);
    OK(sg_watermarks_metrics_get(w, 3, &m));
    CHECK(m.pauses == 1 && m.resumes == 1 && m.time_paused_ns == 2 && m.last_level == 199);
    EXPECT(sg_watermarks_observe(w, 0, 1, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_watermarks_is_paused(NULL, &paused), SG_NULL_ARGUMENT);
    EXPECT(sg_watermarks_metrics_get(NULL, 0, &m), SG_NULL_ARGUMENT);
    sg_watermarks_free(w);
}

static void test_keyed(void) {
    sg_keyed_config cfg;
    sg_keyed *k = NULL, *other = NULL;
    sg_permit p1, p2, p3;
    sg_rejection rej;
    sg_keyed_metrics m;
    sg_isolation iso;
    sg_actionable act;
    sg_permit_info info;
    uint64_t a = 0, b = 0, limit = 0;
    uint32_t shards[8], in_flight[64];
    size_t n = 0;
    char body[SG_ACTIONABLE_BODY_MAX];
    bool per_key = false, recorded = false;

    OK(sg_keyed_config_default(&cfg));
    CHECK(cfg.shards == 64 && cfg.shards_per_key == 2);
    cfg.shard_limit = 1;
    LIFECYCLE(keyed, cfg);
    cfg.shards = 100;
    EXPECT(sg_keyed_new(&cfg, &k), SG_CONFIG_OUT_OF_RANGE);
    cfg.shards = 64;
    cfg.shards_per_key = 9;
    EXPECT(sg_keyed_new(&cfg, &k), SG_CONFIG_OUT_OF_RANGE);
    cfg.shards_per_key = 2;
    cfg.rate_per_second = NAN;
    EXPECT(sg_keyed_new(&cfg, &k), SG_CONFIG_NOT_FINITE);
    cfg.rate_per_second = 0.0;
    cfg.shard_limit = 0;
    EXPECT(sg_keyed_new(&cfg, &k), SG_CONFIG_OUT_OF_RANGE);
    cfg.shard_limit = 1;
    OK(sg_keyed_new(&cfg, &k));
    OK(sg_keyed_new(&cfg, &other));

    OK(sg_keyed_hash_key(7, (const uint8_t *)"tenant-a", 8, &a));
    OK(sg_keyed_hash_key(7, (const uint8_t *)"tenant-b", 8, &b));
    CHECK(a != b);
    OK(sg_keyed_hash_key(7, NULL, 0, &b));
    EXPECT(sg_keyed_hash_key(7, NULL, 3, &b), SG_NULL_ARGUMENT);
    EXPECT(sg_keyed_hash_key(7, (const uint8_t *)"x", 1, NULL), SG_NULL_ARGUMENT);

    OK(sg_keyed_key_limit(k, &limit));
    CHECK(limit == 2);
    OK(sg_keyed_shards_of(k, a, shards, 8, &n));
    CHECK(n == 2 && shards[0] != shards[1] && shards[0] < 64 && shards[1] < 64);
    EXPECT(sg_keyed_shards_of(k, a, shards, 1, &n), SG_BUFFER_TOO_SMALL);
    EXPECT(sg_keyed_shards_of(k, a, NULL, 8, &n), SG_NULL_ARGUMENT);
    EXPECT(sg_keyed_shards_of(k, a, shards, 8, NULL), SG_NULL_ARGUMENT);

    OK(sg_keyed_try_acquire(k, a, 0, 1, &p1, &rej));
    OK(sg_keyed_try_acquire(k, a, 0, 1, &p2, &rej));
    EXPECT(sg_keyed_try_acquire(k, a, 0, 1, &p3, &rej), SG_REJECTED);
    CHECK(rej.reason == SG_REASON_KEY_LIMIT && rej.retry_after_ns == SEC);
    EXPECT(sg_keyed_try_acquire(k, a, 0, 1, NULL, &rej), SG_NULL_ARGUMENT);
    OK(sg_permit_info_get(&p1, &info));
    CHECK(info.kind == SG_PERMIT_KIND_KEYED && info.key_hash == a);
    CHECK(info.shard == shards[0] || info.shard == shards[1]);

    OK(sg_keyed_shard_in_flight(k, in_flight, 64, &n));
    CHECK(n == 64 && in_flight[shards[0]] == 1 && in_flight[shards[1]] == 1);
    EXPECT(sg_keyed_shard_in_flight(k, in_flight, 63, &n), SG_BUFFER_TOO_SMALL);
    EXPECT(sg_keyed_shard_in_flight(k, NULL, 64, &n), SG_NULL_ARGUMENT);
    EXPECT(sg_keyed_shard_in_flight(k, in_flight, 64, NULL), SG_NULL_ARGUMENT);

    EXPECT(sg_keyed_release(other, &p1), SG_FOREIGN_HANDLE);
    OK(sg_keyed_release(k, &p1));
    EXPECT(sg_keyed_release(k, &p1), SG_ALREADY_RELEASED);
    EXPECT(sg_keyed_release(k, NULL), SG_NULL_ARGUMENT);
    OK(sg_keyed_release(k, &p2));
    OK(sg_keyed_record_rejection(k, b, &recorded));
    CHECK(recorded);
    OK(sg_keyed_record_rejection(k, b, NULL));
    EXPECT(sg_keyed_record_rejection(NULL, b, NULL), SG_NULL_ARGUMENT);

    OK(sg_keyed_metrics_get(k, &m));
    CHECK(m.admitted == 2 && m.rejected_key_limit == 1 && m.in_flight == 0 && m.shards == 64);
    CHECK(m.top_keys[0].key_hash == b && m.top_keys[0].count == 2);
    CHECK(m.top_keys[1].key_hash == a && m.top_keys[1].count == 1);
    EXPECT(sg_keyed_metrics_get(k, NULL), SG_NULL_ARGUMENT);

    OK(sg_keyed_isolation(k, &iso));
    CHECK(iso.shards == 64 && iso.shards_per_key == 2 && iso.combinations == 2016.0);
    OK(sg_isolation_compute(4, 2, &iso));
    CHECK(iso.combinations == 6.0);
    EXPECT(sg_isolation_compute(4, 5, &iso), SG_INVALID_ARGUMENT);
    EXPECT(sg_isolation_compute(4, 0, &iso), SG_INVALID_ARGUMENT);
    EXPECT(sg_isolation_compute(4, 2, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_keyed_isolation(NULL, &iso), SG_NULL_ARGUMENT);

    /* Actionable rejections: 429 per key, 503 global, the JSON body. */
    rej.reason = SG_REASON_KEY_RATE;
    rej.retry_after_ns = 29400000000u;
    OK(sg_actionable_from(&rej, &act));
    CHECK(act.status == 429 && act.retry_after_s == 30 && act.reason == SG_REASON_KEY_RATE);
    OK(sg_actionable_write_json(&act, body, sizeof body, &n));
    CHECK(n == strlen(body));
    CHECK(strcmp(body, "{\"error\": \"too many requests\", \"reason\": \"key_rate\", "
                       "\"retry_after_s\": 30, \"retry\": \"not before retry_after_s\"}") == 0);
    EXPECT(sg_actionable_write_json(&act, body, n, &n), SG_BUFFER_TOO_SMALL); /* no room for NUL */
    EXPECT(sg_actionable_write_json(&act, NULL, sizeof body, &n), SG_NULL_ARGUMENT);
    EXPECT(sg_actionable_write_json(&act, body, sizeof body, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_actionable_write_json(NULL, body, sizeof body, &n), SG_NULL_ARGUMENT);
    act.reason = 0;
    EXPECT(sg_actionable_write_json(&act, body, sizeof body, &n), SG_INVALID_ARGUMENT);
    rej.reason = SG_REASON_LIMIT_REACHED;
    rej.retry_after_ns = 0;
    OK(sg_actionable_from(&rej, &act));
    CHECK(act.status == 503 && act.retry_after_s == 1);
    rej.reason = 77;
    EXPECT(sg_actionable_from(&rej, &act), SG_INVALID_ARGUMENT);
    EXPECT(sg_actionable_from(NULL, &act), SG_NULL_ARGUMENT);
    EXPECT(sg_actionable_from(&rej, NULL), SG_NULL_ARGUMENT);
    OK(sg_reason_is_per_key(SG_REASON_KEY_LIMIT, &per_key));
    CHECK(per_key);
    OK(sg_reason_is_per_key(SG_REASON_SHED, &per_key));
    CHECK(!per_key);
    EXPECT(sg_reason_is_per_key(0, &per_key), SG_INVALID_ARGUMENT);
    EXPECT(sg_reason_is_per_key(1, NULL), SG_NULL_ARGUMENT);

    sg_keyed_free(k);
    sg_keyed_free(other);

    /* The other table sizes, and a rate-limited table. */
    {
        uint32_t sizes[4] = {16, 64, 256, 1024};
        int i;
        for (i = 0; i < 4; i++) {
            OK(sg_keyed_config_default(&cfg));
            cfg.shards = sizes[i];
            cfg.rate_per_second = 10.0;
            cfg.rate_burst = 1;
            OK(sg_keyed_new(&cfg, &k));
            /* Two shards per key, each one unit of burst: the third is over the rate. */
            OK(sg_keyed_try_acquire(k, a, SEC, 1, &p1, NULL));
            OK(sg_keyed_try_acquire(k, a, SEC, 1, &p2, NULL));
            EXPECT(sg_keyed_try_acquire(k, a, SEC, 1, &p3, &rej), SG_REJECTED);
            CHECK(rej.reason == SG_REASON_KEY_RATE && rej.retry_after_ns == 100 * MS);
            OK(sg_keyed_release(k, &p1));
            OK(sg_keyed_release(k, &p2));
            sg_keyed_free(k);
        }
    }
}

static void test_retry(void) {
    sg_retry_budget_config cfg;
    sg_retry_budget *b = NULL;
    sg_retry_budget_metrics m;
    sg_token_throttle_config tcfg;
    sg_token_throttle *t = NULL;
    sg_token_throttle_metrics tm;
    sg_rejection rej;
    uint64_t avail = 0;
    double tokens = 0;
    bool allowed = false;
    int i;

    OK(sg_retry_budget_config_default(&cfg));
    CHECK(cfg.ttl_ns == 10 * SEC && cfg.min_retries_per_sec == 10 && cfg.percent_can_retry == 0.1);
    OK(sg_retry_budget_config_finagle(&cfg));
    CHECK(cfg.percent_can_retry == 0.2);
    EXPECT(sg_retry_budget_config_finagle(NULL), SG_NULL_ARGUMENT);
    LIFECYCLE(retry_budget, cfg);
    cfg.ttl_ns = 0;
    EXPECT(sg_retry_budget_new(&cfg, &b), SG_CONFIG_OUT_OF_RANGE);
    OK(sg_retry_budget_config_default(&cfg));
    cfg.percent_can_retry = NAN;
    EXPECT(sg_retry_budget_new(&cfg, &b), SG_CONFIG_NOT_FINITE);
    cfg.percent_can_retry = 0.1;
    cfg.min_retries_per_sec = 0;
    OK(sg_retry_budget_new(&cfg, &b));
    for (i = 0; i < 10; i++) {
        OK(sg_retry_budget_deposit(b, 5 * SEC));
    }
    OK(sg_retry_budget_available(b, 5 * SEC, &avail));
    CHECK(avail == 1);
    OK(sg_retry_budget_try_withdraw(b, 5 * SEC, &rej));
    EXPECT(sg_retry_budget_try_withdraw(b, 5 * SEC, &rej), SG_REJECTED);
    CHECK(rej.reason == SG_REASON_BUDGET_EXHAUSTED);
    OK(sg_retry_budget_metrics_get(b, &m));
    CHECK(m.requests == 10 && m.retries_allowed == 1 && m.retries_denied == 1);
    EXPECT(sg_retry_budget_deposit(NULL, 0), SG_NULL_ARGUMENT);
    EXPECT(sg_retry_budget_try_withdraw(NULL, 0, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_retry_budget_available(b, 0, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_retry_budget_metrics_get(b, NULL), SG_NULL_ARGUMENT);
    sg_retry_budget_free(b);

    OK(sg_token_throttle_config_default(&tcfg));
    CHECK(tcfg.max_tokens == 10.0 && tcfg.token_ratio == 0.1);
    LIFECYCLE(token_throttle, tcfg);
    tcfg.max_tokens = -1;
    EXPECT(sg_token_throttle_new(&tcfg, &t), SG_CONFIG_OUT_OF_RANGE);
    tcfg.max_tokens = 1.0;
    tcfg.token_ratio = 2.0;
    EXPECT(sg_token_throttle_new(&tcfg, &t), SG_CONFIG_INCONSISTENT);
    OK(sg_token_throttle_config_default(&tcfg));
    OK(sg_token_throttle_new(&tcfg, &t));
    OK(sg_token_throttle_try_retry(t, NULL));
    for (i = 0; i < 5; i++) {
        OK(sg_token_throttle_record(t, false));
    }
    OK(sg_token_throttle_is_retry_allowed(t, &allowed));
    CHECK(!allowed);
    EXPECT(sg_token_throttle_try_retry(t, &rej), SG_REJECTED);
    CHECK(rej.reason == SG_REASON_BUDGET_EXHAUSTED && rej.retry_after_ns == 0);
    OK(sg_token_throttle_record(t, true));
    OK(sg_token_throttle_tokens(t, &tokens));
    CHECK(tokens > 5.0 && tokens < 5.2);
    OK(sg_token_throttle_metrics_get(t, &tm));
    CHECK(tm.successes == 1 && tm.failures == 5 && tm.retries_allowed == 1 && tm.retries_denied == 1);
    EXPECT(sg_token_throttle_record(NULL, true), SG_NULL_ARGUMENT);
    EXPECT(sg_token_throttle_try_retry(NULL, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_token_throttle_is_retry_allowed(t, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_token_throttle_tokens(t, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_token_throttle_metrics_get(t, NULL), SG_NULL_ARGUMENT);
    sg_token_throttle_free(t);
}

static void test_adaptive_throttle(void) {
    sg_adaptive_throttle_config cfg;
    sg_adaptive_throttle *t = NULL;
    sg_adaptive_throttle_metrics m;
    sg_rejection rej;
    double p = 0;
    int i;

    OK(sg_adaptive_throttle_config_default(&cfg));
    CHECK(cfg.k == 2.0 && cfg.window_ns == 120 * SEC && cfg.form == SG_THROTTLE_FORM_RING);
    LIFECYCLE(adaptive_throttle, cfg);
    cfg.form = 7;
    EXPECT(sg_adaptive_throttle_new(&cfg, &t), SG_CONFIG_OUT_OF_RANGE);
    cfg.form = SG_THROTTLE_FORM_EMA;
    cfg.k = NAN;
    EXPECT(sg_adaptive_throttle_new(&cfg, &t), SG_CONFIG_NOT_FINITE);
    cfg.k = 2.0;
    OK(sg_adaptive_throttle_new(&cfg, &t)); /* EMA form builds */
    sg_adaptive_throttle_free(t);
    OK(sg_adaptive_throttle_config_default(&cfg));
    OK(sg_adaptive_throttle_new(&cfg, &t));
    for (i = 0; i < 100; i++) {
        OK(sg_adaptive_throttle_record(t, 10 * SEC, false));
    }
    OK(sg_adaptive_throttle_drop_probability(t, 10 * SEC, &p));
    CHECK(p == 0.75);
    EXPECT(sg_adaptive_throttle_should_throttle(t, 10 * SEC, 0, &rej), SG_REJECTED);
    CHECK(rej.reason == SG_REASON_THROTTLED);
    OK(sg_adaptive_throttle_should_throttle(t, 10 * SEC, UINT64_MAX, &rej));
    OK(sg_adaptive_throttle_metrics_get(t, &m));
    CHECK(m.throttled == 1 && m.drop_probability == 0.75);
    EXPECT(sg_adaptive_throttle_record(NULL, 0, true), SG_NULL_ARGUMENT);
    EXPECT(sg_adaptive_throttle_should_throttle(NULL, 0, 0, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_adaptive_throttle_drop_probability(t, 0, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_adaptive_throttle_metrics_get(t, NULL), SG_NULL_ARGUMENT);
    sg_adaptive_throttle_free(t);
}

static void test_backoff(void) {
    sg_backoff_config cfg;
    sg_backoff *b = NULL, *c = NULL;
    uint64_t d = 0, e = 0, ceiling = 0;
    uint32_t attempt;

    OK(sg_backoff_config_default(&cfg));
    CHECK(cfg.base_ns == 100 * MS && cfg.cap_ns == SEC && cfg.jitter == SG_JITTER_FULL);
    LIFECYCLE(backoff, cfg);
    cfg.jitter = 9;
    EXPECT(sg_backoff_new(&cfg, &b), SG_CONFIG_OUT_OF_RANGE);
    cfg.jitter = SG_JITTER_FULL;
    cfg.multiplier = NAN;
    EXPECT(sg_backoff_new(&cfg, &b), SG_CONFIG_NOT_FINITE);
    cfg.multiplier = 2.0;
    cfg.cap_ns = cfg.base_ns - 1;
    EXPECT(sg_backoff_new(&cfg, &b), SG_CONFIG_INCONSISTENT);
    OK(sg_backoff_config_default(&cfg));
    cfg.seed = 42;
    OK(sg_backoff_new(&cfg, &b));
    OK(sg_backoff_new(&cfg, &c));
    for (attempt = 1; attempt <= 6; attempt++) {
        OK(sg_backoff_ceiling(b, attempt, &ceiling));
        OK(sg_backoff_next_delay(b, attempt, 0, &d));
        OK(sg_backoff_next_delay(c, attempt, 0, &e));
        CHECK(d <= ceiling && ceiling <= SEC);
        CHECK(d == e); /* same seed, same delays */
    }
    OK(sg_backoff_next_delay(b, 3, 5 * SEC, &d));
    CHECK(d == 5 * SEC); /* the server's hint wins over the cap */
    OK(sg_backoff_reset(b));
    EXPECT(sg_backoff_reset(NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_backoff_next_delay(b, 1, 0, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_backoff_next_delay(NULL, 1, 0, &d), SG_NULL_ARGUMENT);
    EXPECT(sg_backoff_ceiling(b, 1, NULL), SG_NULL_ARGUMENT);
    sg_backoff_free(b);
    sg_backoff_free(c);
    for (cfg.jitter = SG_JITTER_NONE; cfg.jitter <= SG_JITTER_DECORRELATED; cfg.jitter++) {
        OK(sg_backoff_new(&cfg, &b));
        OK(sg_backoff_next_delay(b, 2, 0, &d));
        CHECK(d <= SEC);
        if (cfg.jitter == SG_JITTER_NONE) {
            CHECK(d == 200 * MS);
        }
        sg_backoff_free(b);
    }
}

static void test_breaker(void) {
    sg_breaker_config cfg;
    sg_breaker *b = NULL, *other = NULL;
    sg_breaker_metrics m;
    sg_permit p, probe, q;
    sg_rejection rej;
    sg_permit_info info;
    uint32_t state = 99;
    bool open = false;
    int i;
    uint64_t now = 100 * SEC;

    OK(sg_breaker_config_default(&cfg));
    CHECK(cfg.window_kind == SG_BREAKER_WINDOW_COUNT && cfg.window_count == 100);
    LIFECYCLE(breaker, cfg);
    cfg.window_kind = 5;
    EXPECT(sg_breaker_new(&cfg, &b), SG_CONFIG_OUT_OF_RANGE);
    cfg.window_kind = SG_BREAKER_WINDOW_COUNT;
    cfg.minimum_calls = 1000;
    EXPECT(sg_breaker_new(&cfg, &b), SG_CONFIG_INCONSISTENT);
    cfg.minimum_calls = 4;
    cfg.failure_rate_threshold = NAN;
    EXPECT(sg_breaker_new(&cfg, &b), SG_CONFIG_NOT_FINITE);
    cfg.failure_rate_threshold = 0.5;
    cfg.window_kind = SG_BREAKER_WINDOW_TIME;
    cfg.window_ns = 1;
    EXPECT(sg_breaker_new(&cfg, &b), SG_CONFIG_OUT_OF_RANGE);
    cfg.window_ns = 10 * SEC;
    OK(sg_breaker_new(&cfg, &b)); /* a time window builds */
    sg_breaker_free(b);

    cfg.window_kind = SG_BREAKER_WINDOW_COUNT;
    cfg.window_count = 10;
    cfg.open_duration_ns = 5 * SEC;
    cfg.open_jitter = 0.0;
    cfg.half_open_probes = 1;
    cfg.ramp_duration_ns = 0;
    OK(sg_breaker_new(&cfg, &b));
    OK(sg_breaker_new(&cfg, &other));
    for (i = 0; i < 4; i++) {
        OK(sg_breaker_try_acquire(b, now, &p, NULL));
        EXPECT(sg_breaker_record(b, &p, now, 7, MS), SG_INVALID_ARGUMENT);
        EXPECT(sg_breaker_record(other, &p, now, SG_OUTCOME_DROPPED, MS), SG_FOREIGN_HANDLE);
        OK(sg_breaker_record(b, &p, now, SG_OUTCOME_DROPPED, 10 * MS));
        EXPECT(sg_breaker_record(b, &p, now, SG_OUTCOME_DROPPED, 10 * MS), SG_ALREADY_RELEASED);
    }
    OK(sg_breaker_state(b, now, &state));
    CHECK(state == SG_BREAKER_OPEN);
    OK(sg_breaker_is_open(b, now, &open));
    CHECK(open);
    EXPECT(sg_breaker_try_acquire(b, now, &p, &rej), SG_REJECTED);
    CHECK(rej.reason == SG_REASON_BREAKER_OPEN && rej.retry_after_ns == 5 * SEC);
    OK(sg_breaker_try_acquire(b, now + 5 * SEC, &probe, NULL));
    OK(sg_permit_info_get(&probe, &info));
    CHECK(info.kind == SG_PERMIT_KIND_BREAKER && info.is_probe);
    EXPECT(sg_breaker_try_acquire(b, now + 5 * SEC, &q, NULL), SG_REJECTED);
    OK(sg_breaker_record(b, &probe, now + 5 * SEC, SG_OUTCOME_SUCCESS, 10 * MS));
    OK(sg_breaker_state(b, now + 5 * SEC, &state));
    CHECK(state == SG_BREAKER_CLOSED);
    OK(sg_breaker_metrics_get(b, now + 5 * SEC, &m));
    CHECK(m.opened == 1 && m.half_opened == 1 && m.closed == 1 && m.probes == 1);
    CHECK(m.state == SG_BREAKER_CLOSED && m.admit_permille == 1000);
    EXPECT(sg_breaker_try_acquire(NULL, now, &p, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_breaker_try_acquire(b, now, NULL, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_breaker_record(b, NULL, now, 0, 0), SG_NULL_ARGUMENT);
    EXPECT(sg_breaker_state(b, now, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_breaker_is_open(NULL, now, &open), SG_NULL_ARGUMENT);
    EXPECT(sg_breaker_metrics_get(b, now, NULL), SG_NULL_ARGUMENT);
    /* A breaker permit is refused by a limiter. */
    {
        sg_limiter_config lc;
        sg_limiter *l = NULL;
        fixed_limiter(&lc, 1.0);
        OK(sg_limiter_new(&lc, &l));
        OK(sg_breaker_try_acquire(b, now + 6 * SEC, &p, NULL));
        EXPECT(sg_limiter_release(l, &p, now, SG_OUTCOME_SUCCESS), SG_FOREIGN_HANDLE);
        OK(sg_breaker_record(b, &p, now + 6 * SEC, SG_OUTCOME_IGNORED, 0));
        sg_limiter_free(l);
    }
    sg_breaker_free(b);
    sg_breaker_free(other);
}

static void test_rate(void) {
    sg_rate_limiter_config cfg;
    sg_rate_limiter *r = NULL;
    sg_rate_limiter_metrics m;
    sg_paced_drain_config dcfg;
    sg_paced_drain *d = NULL;
    sg_paced_drain_metrics dm;
    sg_rejection rej;
    uint32_t n = 0;
    uint64_t w = 0;
    int i;

    OK(sg_rate_limiter_config_default(&cfg));
    LIFECYCLE(rate_limiter, cfg);
    cfg.per_second = NAN;
    EXPECT(sg_rate_limiter_new(&cfg, &r), SG_CONFIG_NOT_FINITE);
    cfg.per_second = 10.0;
    cfg.burst = 0;
    EXPECT(sg_rate_limiter_new(&cfg, &r), SG_CONFIG_OUT_OF_RANGE);
    cfg.burst = 5;
    OK(sg_rate_limiter_new(&cfg, &r));
    for (i = 0; i < 5; i++) {
        OK(sg_rate_limiter_check(r, 7 * SEC, 1, NULL));
    }
    EXPECT(sg_rate_limiter_check(r, 7 * SEC, 1, &rej), SG_REJECTED);
    CHECK(rej.reason == SG_REASON_RATE_LIMITED && rej.retry_after_ns == 100 * MS);
    EXPECT(sg_rate_limiter_check(r, 7 * SEC, 6, &rej), SG_REJECTED);
    CHECK(rej.retry_after_ns == SG_NEVER); /* above the burst: never */
    OK(sg_rate_limiter_wait_time(r, 7 * SEC, 1, &w));
    CHECK(w == 100 * MS);
    OK(sg_rate_limiter_available(r, 8 * SEC, &n));
    CHECK(n == 5);
    OK(sg_rate_limiter_take_up_to(r, 8 * SEC, 3, &n));
    CHECK(n == 3);
    OK(sg_rate_limiter_metrics_get(r, &m));
    CHECK(m.allowed == 8 && m.denied == 2 && m.emission_ns == 100 * MS && m.burst == 5);
    CHECK(m.tolerance_ns == 400 * MS);
    EXPECT(sg_rate_limiter_check(NULL, 0, 1, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_rate_limiter_take_up_to(r, 0, 1, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_rate_limiter_available(r, 0, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_rate_limiter_wait_time(r, 0, 1, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_rate_limiter_metrics_get(r, NULL), SG_NULL_ARGUMENT);
    sg_rate_limiter_free(r);
    cfg.emission_ns = 1 * MS; /* the interval form */
    OK(sg_rate_limiter_new(&cfg, &r));
    OK(sg_rate_limiter_metrics_get(r, &m));
    CHECK(m.emission_ns == MS);
    sg_rate_limiter_free(r);

    OK(sg_paced_drain_config_default(&dcfg));
    CHECK(dcfg.target_per_sec == 1000.0 && dcfg.burst == 80);
    LIFECYCLE(paced_drain, dcfg);
    OK(sg_paced_drain_config_for(2000.0, &dcfg));
    CHECK(dcfg.burst == 160 && dcfg.headroom == 0.2);
    EXPECT(sg_paced_drain_config_for(NAN, &dcfg), SG_INVALID_ARGUMENT);
    EXPECT(sg_paced_drain_config_for(-1.0, &dcfg), SG_INVALID_ARGUMENT);
    EXPECT(sg_paced_drain_config_for(1.0, NULL), SG_NULL_ARGUMENT);
    dcfg.headroom = 1.0;
    EXPECT(sg_paced_drain_new(&dcfg, &d), SG_CONFIG_OUT_OF_RANGE);
    OK(sg_paced_drain_config_default(&dcfg));
    OK(sg_paced_drain_new(&dcfg, &d));
    OK(sg_paced_drain_permits(d, 10 * SEC, 1000000, &n));
    CHECK(n == 80);
    OK(sg_paced_drain_permits(d, 10 * SEC + 10 * MS, 1000000, &n));
    CHECK(n == 8);
    OK(sg_paced_drain_next_permit_in(d, 10 * SEC + 10 * MS, &w));
    CHECK(w > 0 && w <= 2 * MS);
    OK(sg_paced_drain_time_to_drain(d, 3600000, 600.0, &w));
    CHECK(w == 18000 * SEC); /* 3.6 M items at 800 − 600 = 200/s */
    OK(sg_paced_drain_time_to_drain(d, 1, 900.0, &w));
    CHECK(w == SG_NEVER);
    EXPECT(sg_paced_drain_time_to_drain(d, 1, NAN, &w), SG_INVALID_ARGUMENT);
    EXPECT(sg_paced_drain_time_to_drain(d, 1, 1.0, NULL), SG_NULL_ARGUMENT);
    OK(sg_paced_drain_metrics_get(d, &dm));
    CHECK(dm.started == 88 && dm.calls == 2 && dm.drain_per_sec == 800.0);
    EXPECT(sg_paced_drain_permits(NULL, 0, 1, &n), SG_NULL_ARGUMENT);
    EXPECT(sg_paced_drain_next_permit_in(d, 0, NULL), SG_NULL_ARGUMENT);
    EXPECT(sg_paced_drain_metrics_get(d, NULL), SG_NULL_ARGUMENT);
    sg_paced_drain_free(d);

    OK(sg_time_to_drain(3600000, 1200.0, 1000.0, &w));
    CHECK(w == 5 * 3600 * SEC);
    OK(sg_time_to_drain(1, 1000.0, 1000.0, &w));
    CHECK(w == SG_NEVER);
    EXPECT(sg_time_to_drain(1, -1.0, 0.0, &w), SG_INVALID_ARGUMENT);
    EXPECT(sg_time_to_drain(1, INFINITY, 0.0, &w), SG_INVALID_ARGUMENT);
    EXPECT(sg_time_to_drain(1, 1.0, 0.0, NULL), SG_NULL_ARGUMENT);
}

/* Deadline headers: parse, combine (smallest wins), arrival deadline, outgoing value. */
#define B(s) ((const uint8_t *)(s)), strlen(s)
static void test_deadline(void) {
    uint64_t budget = 7, d = 0, smallest = UINT64_MAX;
    uint32_t reason = 99;
    char buf[SG_DEADLINE_BUF_LEN];
    size_t n = 99;
    size_t i;
    static const char *const names[] = {"grpc-timeout", "x-envoy-expected-rq-timeout-ms",
                                        "surgeguard-timeout-ms"};
    static const char *const values[] = {"2S", "1500", "oops"};

    OK(sg_deadline_parse(B("grpc-timeout"), B("250m"), &budget, &reason));
    CHECK(budget == 250 * SG_MS && reason == 99);
    OK(sg_deadline_parse(B("GRPC-Timeout"), B(" 7u\t"), &budget, &reason));
    CHECK(budget == 7000);
    OK(sg_deadline_parse(B("surgeguard-timeout-ms"), B("0"), &budget, &reason));
    CHECK(budget == 0);
    OK(sg_deadline_parse(B("x-envoy-expected-rq-timeout-ms"), B("3600000"), &budget, &reason));
    CHECK(budget == SG_DEADLINE_MAX_BUDGET_NS);

    /* Ignored: only the reason is written. */
    budget = 7;
    EXPECT(sg_deadline_parse(B("grpc-timeout"), B("1.5S"), &budget, &reason), SG_IGNORED);
    CHECK(reason == SG_DEADLINE_MALFORMED && budget == 7);
    EXPECT(sg_deadline_parse(B("grpc-timeout"), B("123456789n"), &budget, &reason), SG_IGNORED);
    CHECK(reason == SG_DEADLINE_MALFORMED);
    EXPECT(sg_deadline_parse(B("my-timeout"), B("-5"), &budget, &reason), SG_IGNORED);
    CHECK(reason == SG_DEADLINE_NEGATIVE);
    EXPECT(sg_deadline_parse(B("grpc-timeout"), B("2H"), &budget, &reason), SG_IGNORED);
    CHECK(reason == SG_DEADLINE_TOO_LARGE && budget == 7);
    EXPECT(sg_deadline_parse(B("surgeguard-timeout-ms"), B(""), &budget, &reason), SG_IGNORED);
    CHECK(reason == SG_DEADLINE_MALFORMED);
    CHECK(strcmp(sg_deadline_reason_str(SG_DEADLINE_TOO_LARGE), "too_large") == 0);
    CHECK(strcmp(sg_deadline_reason_str(0), "unknown") == 0);
    CHECK(strcmp(sg_status_str(SG_IGNORED), "ignored") == 0);

    /* Bad arguments: nothing written. */
    reason = 99;
    EXPECT(sg_deadline_parse(NULL, 0, B("1S"), &budget, &reason), SG_NULL_ARGUMENT);
    EXPECT(sg_deadline_parse(B("grpc-timeout"), NULL, 0, &budget, &reason), SG_NULL_ARGUMENT);
    EXPECT(sg_deadline_parse(B("grpc-timeout"), B("1S"), NULL, &reason), SG_NULL_ARGUMENT);
    EXPECT(sg_deadline_parse(B("grpc-timeout"), B("xx"), &budget, NULL), SG_NULL_ARGUMENT);
    CHECK(budget == 7 && reason == 99);

    /* Several headers: the smallest valid budget wins. */
    for (i = 0; i < 3; i++) {
        if (sg_deadline_parse(B(names[i]), B(values[i]), &budget, &reason) == SG_OK &&
            budget < smallest)
            smallest = budget;
    }
    CHECK(smallest == 1500 * SG_MS);

    OK(sg_deadline_at(1000, 500, &d));
    CHECK(d == 1500);
    OK(sg_deadline_at(SG_MAX_NOW - 1, SG_DEADLINE_MAX_BUDGET_NS, &d));
    CHECK(d == SG_MAX_NOW);
    d = 3;
    EXPECT(sg_deadline_at(SG_MAX_NOW + 1, 1, &d), SG_TIME_OUT_OF_RANGE);
    EXPECT(sg_deadline_at(0, 1, NULL), SG_NULL_ARGUMENT);
    CHECK(d == 3);

    /* Outgoing: deadline - now - margin, rounded down, NUL-terminated. */
    OK(sg_deadline_format(B("grpc-timeout"), 2 * SG_SEC, SG_SEC / 2, 0, buf, sizeof buf, &n));
    CHECK(n == 8 && strcmp(buf, "1500000u") == 0);
    OK(sg_deadline_format(B("surgeguard-timeout-ms"), 2 * SG_SEC, 0, SG_MS / 2, buf, sizeof buf, &n));
    CHECK(n == 4 && strcmp(buf, "1999") == 0);
    memset(buf, 'x', sizeof buf);
    n = 99;
    EXPECT(sg_deadline_format(B("surgeguard-timeout-ms"), SG_SEC, SG_SEC - SG_MS + 1, 0, buf, sizeof buf, &n),
           SG_EXHAUSTED);
    EXPECT(sg_deadline_format(B("grpc-timeout"), SG_SEC, 2 * SG_SEC, 0, buf, sizeof buf, &n), SG_EXHAUSTED);
    EXPECT(sg_deadline_format(B("grpc-timeout"), SG_NO_DEADLINE, 0, 0, buf, sizeof buf, &n), SG_UNBOUNDED);
    EXPECT(sg_deadline_format(B("grpc-timeout"), SG_SEC, SG_MAX_NOW + 1, 0, buf, sizeof buf, &n),
           SG_TIME_OUT_OF_RANGE);
    EXPECT(sg_deadline_format(B("surgeguard-timeout-ms"), 2 * SG_SEC, 0, 0, buf, 4, &n), SG_BUFFER_TOO_SMALL);
    EXPECT(sg_deadline_format(NULL, 0, SG_SEC, 0, 0, buf, sizeof buf, &n), SG_NULL_ARGUMENT);
    EXPECT(sg_deadline_format(B("grpc-timeout"), SG_SEC, 0, 0, NULL, 16, &n), SG_NULL_ARGUMENT);
    EXPECT(sg_deadline_format(B("grpc-timeout"), SG_SEC, 0, 0, buf, sizeof buf, NULL), SG_NULL_ARGUMENT);
    CHECK(n == 99 && buf[0] == 'x' && buf[SG_DEADLINE_BUF_LEN - 1] == 'x');
    OK(sg_deadline_format(B("surgeguard-timeout-ms"), 2 * SG_SEC, 0, 0, buf, 5, &n));
    CHECK(n == 4 && strcmp(buf, "2000") == 0);
}
#undef B

/* A config refusal names its field, as the C struct spells it. */
static void test_config_errors_name_their_field(void) {
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

/* Structs grow through their reserved words: a config as a program built against this
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

/* Unused settings are checked by the same rule as used ones. */
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

/* Moving onto a live permit is refused and loses nothing. */
static void test_permit_move_onto_a_live_permit(void) {
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

/* A `now` above SG_MAX_NOW is refused and moves nothing. */
static void test_limiter_now_out_of_range(void) {
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

/* The JSON writer: a never-hint omits retry_after_s; only refusals are written. */
static void test_actionable_json(void) {
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

/* The lag meter reports over-consumption; backoff attempt 0 is refused; queries take
 * const handles (this function does not compile against a header where they do not). */
static void test_lag_meter_over_consumed_and_backoff_attempt_zero(void) {
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

/* The isolation math is bounded: a hostile `k` (UINT32_MAX - 1) is refused at once (it
 * once took one step per shard of `k`, about ten seconds a call). */
static void test_keyed_isolation_bounded(void) {
    sg_isolation iso;
    EXPECT(sg_isolation_compute(UINT32_MAX, UINT32_MAX - 1, &iso), SG_INVALID_ARGUMENT);
    EXPECT(sg_isolation_compute(SG_ISOLATION_MAX_SHARDS + 1, 2, &iso), SG_INVALID_ARGUMENT);
    OK(sg_isolation_compute(SG_ISOLATION_MAX_SHARDS, SG_ISOLATION_MAX_SHARDS - 1, &iso));
    OK(sg_isolation_compute(1024, 2, &iso));
    CHECK(iso.share_all > 0.0 && iso.share_all < 1e-5);
}

/* Constructors build objects by value on the stack (a 4096-waiter gate needs about
 * 1.5 MiB, written in place): the stacks the header recommends (4 MiB for a gate, 1 MiB
 * for a keyed table) are enough. */
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
    test_strings_and_time();
    test_limiter_configs();
    test_limiter();
    test_credits();
    test_lag_meter();
    test_watermarks();
    test_keyed();
    test_retry();
    test_adaptive_throttle();
    test_backoff();
    test_breaker();
    test_rate();
    test_deadline();
    test_config_errors_name_their_field();
    test_reserved_words();
    test_unused_settings_checked();
    test_permit_move_onto_a_live_permit();
    test_limiter_now_out_of_range();
    test_actionable_json();
    test_lag_meter_over_consumed_and_backoff_attempt_zero();
    test_keyed_isolation_bounded();
    test_constructor_stack_bounds();
    return SUMMARY("api");
}
