#define _POSIX_C_SOURCE 200809L
/* The C replayer of the conformance vectors (tests/vectors/README.md): reads the line
 * format (tests/vectors/vectors.txt), replays every step through the C ABI with the
 * vector's `now`, and stops at the first difference, printing scenario, step, expected
 * and actual. Usage: replay_vectors [--shared] [path/to/vectors.txt] (--shared: the
 * limiter, retry budget, rate limiter and keyed table in anonymous shared memory).
 *
 * A step whose `now` is above SG_MAX_NOW (2^62 ns) is where the C ABI parts from the
 * core on purpose: the core acts at the latest time it has seen, the C ABI refuses such a
 * `now` up front with SG_TIME_OUT_OF_RANGE. So is a backoff `attempt` of 0: the C ABI
 * says SG_INVALID_ARGUMENT (1 is the first retry). The replayer checks that refusal and
 * stops comparing that scenario there (its later expectations assume the step acted). */
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include "surgeguard.h"

#define MAX_TOK 96

typedef struct kv {
    char *key;
    char *val;
} kv;

static char scenario[256];
static char kind[64];
static unsigned long step_no;
static unsigned long total_steps;
static kv cfg[MAX_TOK];
static size_t ncfg;
static kv args[MAX_TOK];
static size_t nargs;
static kv exps[MAX_TOK];
static size_t nexps;
static size_t nchecked;

static void die(const char *what, const char *key, const char *expected, const char *actual) {
    fprintf(stderr,
            "replay_vectors: scenario %s step %lu: %s %s: expected %s, actual %s\n", scenario,
            step_no, what, key, expected ? expected : "(none)", actual ? actual : "(none)");
    exit(1);
}

static const char *find(const kv *t, size_t n, const char *key) {
    for (size_t i = 0; i < n; i++) {
        if (strcmp(t[i].key, key) == 0) return t[i].val;
    }
    return NULL;
}
static const char *need(const kv *t, size_t n, const char *key) {
    const char *v = find(t, n, key);
    if (!v) die("missing field", key, "a value", NULL);
    return v;
}
static uint64_t to_u(const char *s) { return strtoull(s, NULL, 10); }
static double to_f(const char *s) { return strtod(s, NULL); }
static int is_null(const char *s) { return s == NULL || strcmp(s, "null") == 0; }

static uint64_t arg_u(const char *k) { return to_u(need(args, nargs, k)); }
static uint64_t cfg_u(const char *k) { return to_u(need(cfg, ncfg, k)); }
static double cfg_f(const char *k) { return to_f(need(cfg, ncfg, k)); }
static bool cfg_b(const char *k) { return strcmp(need(cfg, ncfg, k), "true") == 0; }
static const char *cfg_s(const char *k) { return need(cfg, ncfg, k); }

/* Checks of the expected outputs: each compares one field and counts it; a step passes
 * when every expected field was compared and equal. */
static void chk_s(const char *k, const char *actual) {
    const char *e = find(exps, nexps, k);
    if (!e || strcmp(e, actual) != 0) die("field", k, e, actual);
    nchecked++;
}
static void chk_u(const char *k, uint64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
    chk_s(k, buf);
}
static void chk_b(const char *k, bool v) { chk_s(k, v ? "true" : "false"); }
static void chk_f(const char *k, double v) {
    const char *e = find(exps, nexps, k);
    char buf[40];
    snprintf(buf, sizeof buf, "%.17g", v);
    if (!e || to_f(e) != v) die("field", k, e, buf);
    nchecked++;
}
/* `null` stands for "none": SG_NEVER for durations, INFINITY for float seconds. */
static void chk_never(const char *k, uint64_t v) {
    if (v == SG_NEVER) chk_s(k, "null"); else chk_u(k, v);
}
static void chk_finf(const char *k, double v) {
    if (v == INFINITY) chk_s(k, "null"); else chk_f(k, v);
}
static void chk_list_u32(const char *k, const uint32_t *v, size_t n) {
    char buf[256] = "";
    size_t used = 0;
    for (size_t i = 0; i < n; i++) {
        used += (size_t)snprintf(buf + used, sizeof buf - used, "%s%u", i ? "," : "", v[i]);
    }
    chk_s(k, buf);
}
/* The status the C ABI must answer for the current step where it refuses what the core
 * accepts (SG_OK: none): SG_TIME_OUT_OF_RANGE for a `now` above SG_MAX_NOW,
 * SG_INVALID_ARGUMENT for a backoff `attempt` 0. That status jumps back to the step loop. */
static sg_status refusal_expected = SG_OK;
static jmp_buf refused;
static void note(sg_status st) {
    if (refusal_expected != SG_OK && st == refusal_expected) longjmp(refused, 1);
}
static void chk_rej(sg_status st, const sg_rejection *r) {
    note(st);
    if (st != SG_OK && st != SG_REJECTED) die("status", "ok", "ok or rejected", sg_status_str(st));
    chk_b("ok", st == SG_OK);
    if (st == SG_REJECTED) {
        chk_s("reason", sg_reason_str(r->reason));
        chk_u("retry_after", r->retry_after_ns);
    }
}
static void ok(sg_status st, const char *what) {
    note(st);
    if (st != SG_OK) die("call", what, "ok", sg_status_str(st));
}
static uint32_t outcome_arg(void) {
    const char *o = need(args, nargs, "outcome");
    if (strcmp(o, "success") == 0) return SG_OUTCOME_SUCCESS;
    if (strcmp(o, "dropped") == 0) return SG_OUTCOME_DROPPED;
    return SG_OUTCOME_IGNORED;
}

/* The limiter part of a config, keys under `prefix` ("" or "limiter."). */
static void limiter_cfg(const char *prefix, sg_limiter_config *c) {
    char k[128];
#define P(name) (snprintf(k, sizeof k, "%s%s", prefix, name), k)
    ok(sg_limiter_config_default(c), "sg_limiter_config_default");
    const char *alg = cfg_s(P("algorithm"));
    double ini = cfg_f(P("algo.initial_limit")), mn = cfg_f(P("algo.min_limit")),
           mx = cfg_f(P("algo.max_limit"));
    if (strcmp(alg, "fixed") == 0) {
        c->algorithm = SG_ALGORITHM_FIXED;
        c->fixed.initial_limit = ini, c->fixed.min_limit = mn, c->fixed.max_limit = mx;
    } else if (strcmp(alg, "aimd") == 0) {
        c->algorithm = SG_ALGORITHM_AIMD;
        c->aimd.initial_limit = ini, c->aimd.min_limit = mn, c->aimd.max_limit = mx;
        c->aimd.target_latency_ns = cfg_u(P("algo.target_latency_ns"));
        c->aimd.backoff_ratio = cfg_f(P("algo.backoff_ratio"));
        c->aimd.timeout_ns = cfg_u(P("algo.timeout_ns"));
        c->aimd.slow_start = cfg_b(P("algo.slow_start"));
        c->aimd.netflix_parity = cfg_b(P("algo.netflix_parity"));
    } else if (strcmp(alg, "hysteresis") == 0) {
        c->algorithm = SG_ALGORITHM_HYSTERESIS;
        c->hysteresis.initial_limit = ini, c->hysteresis.min_limit = mn;
        c->hysteresis.max_limit = mx;
        c->hysteresis.target_latency_ns = cfg_u(P("algo.target_latency_ns"));
        c->hysteresis.slow_start = cfg_b(P("algo.slow_start"));
    } else if (strcmp(alg, "gradient") == 0) {
        c->algorithm = SG_ALGORITHM_GRADIENT;
        c->gradient.initial_limit = ini, c->gradient.min_limit = mn, c->gradient.max_limit = mx;
        c->gradient.smoothing = cfg_f(P("algo.smoothing"));
        c->gradient.buffer = cfg_f(P("algo.buffer"));
        c->gradient.slow_start = cfg_b(P("algo.slow_start"));
    } else if (strcmp(alg, "gradient2") == 0) {
        c->algorithm = SG_ALGORITHM_GRADIENT2;
        c->gradient2.initial_limit = ini, c->gradient2.min_limit = mn;
        c->gradient2.max_limit = mx;
        c->gradient2.smoothing = cfg_f(P("algo.smoothing"));
        c->gradient2.queue_size = cfg_f(P("algo.queue_size"));
        c->gradient2.long_window = (uint32_t)cfg_u(P("algo.long_window"));
        c->gradient2.fixed = cfg_b(P("algo.fixed"));
        c->gradient2.slow_start = cfg_b(P("algo.slow_start"));
    } else if (strcmp(alg, "vegas") == 0) {
        c->algorithm = SG_ALGORITHM_VEGAS;
        c->vegas.initial_limit = ini, c->vegas.min_limit = mn, c->vegas.max_limit = mx;
        c->vegas.smoothing = cfg_f(P("algo.smoothing"));
        c->vegas.probe_multiplier = (uint32_t)cfg_u(P("algo.probe_multiplier"));
        c->vegas.seed = cfg_u(P("algo.seed"));
        c->vegas.slow_start = cfg_b(P("algo.slow_start"));
    } else {
        die("config", "algorithm", "a known algorithm", alg);
    }
    c->levels = (uint32_t)cfg_u(P("levels"));
    const char *w = cfg_s(P("weights"));
    for (uint32_t i = 0; i < 8; i++) c->weights[i] = 0.0;
    for (uint32_t i = 0; i < c->levels && *w; i++) {
        char *end;
        c->weights[i] = strtod(w, &end);
        w = *end == ',' ? end + 1 : end;
    }
    c->min_window_ns = cfg_u(P("min_window_ns"));
    c->max_window_ns = cfg_u(P("max_window_ns"));
    c->min_samples = (uint32_t)cfg_u(P("min_samples"));
    c->active_ns = cfg_u(P("active_ns"));
#undef P
}

/* The object of the current scenario and the handles its steps refer to. */
static sg_limiter *lim;
static sg_gate *gate;
static sg_retry_budget *budget;
static sg_token_throttle *token;
static sg_adaptive_throttle *adaptive;
static sg_backoff *backoff;
static sg_breaker *breaker;
static sg_rate_limiter *rate;
static sg_credits *credits;
static sg_lag_meter *lagm;
static sg_watermarks *wm;
static sg_paced_drain *drain;
static sg_keyed *keyed;
static uint64_t keyed_seed;
static sg_permit *permits;   /* by step index */
static uint64_t *acquired;   /* breaker: the acquire's now, by step index */
static uint64_t *tickets;    /* gate: the ticket of an arrive step */
static bool *queued;         /* gate: that ticket still waits */
static size_t nsteps;
static bool deadline_kind;

/* --shared: the families with a placement (limiter, retry budget, rate limiter, keyed
 * table) are made in anonymous shared memory (sg_<type>_open_shared) instead of in this
 * process; the vectors must replay unchanged through either placement. */
static bool shared_placement;
#define PLACED_NEW(T, cfg, out) \
    (shared_placement ? sg_##T##_open_shared(NULL, cfg, out) : sg_##T##_new(cfg, out))

static void build(void) {
    permits = calloc(nsteps + 1, sizeof *permits);
    acquired = calloc(nsteps + 1, sizeof *acquired);
    tickets = calloc(nsteps + 1, sizeof *tickets);
    queued = calloc(nsteps + 1, sizeof *queued);
    if (!permits || !acquired || !tickets || !queued) die("alloc", "steps", "memory", NULL);
    if (strcmp(kind, "limiter") == 0) {
        sg_limiter_config c;
        limiter_cfg("", &c);
        ok(PLACED_NEW(limiter, &c, &lim), "sg_limiter_new");
    } else if (strcmp(kind, "gate") == 0) {
        sg_gate_config c;
        ok(sg_gate_config_default(&c), "sg_gate_config_default");
        limiter_cfg("limiter.", &c.limiter);
        c.queue_capacity = (uint32_t)cfg_u("queue_capacity");
        c.codel_enabled = cfg_b("codel");
        c.codel_target_ns = cfg_u("codel_target_ns");
        c.codel_interval_ns = cfg_u("codel_interval_ns");
        c.codel_mode = strcmp(cfg_s("codel_mode"), "rfc8289") == 0 ? SG_CODEL_RFC8289 : SG_CODEL_FOLLY;
        const char *lifo = cfg_s("lifo");
        if (strcmp(lifo, "codel") == 0) {
            c.lifo = SG_LIFO_CODEL_OVERLOADED;
        } else if (strcmp(lifo, "never") == 0) {
            c.lifo = SG_LIFO_NEVER;
        } else {
            c.lifo = SG_LIFO_OCCUPANCY;
            c.lifo_occupancy = to_f(lifo);
        }
        c.max_wait_ns = cfg_u("max_wait_ns");
        c.aging_enabled = find(cfg, ncfg, "aging.from") != NULL;
        if (c.aging_enabled) {
            c.aging_from = (uint32_t)cfg_u("aging.from");
            c.aging_to = (uint32_t)cfg_u("aging.to");
            c.aging_after_ns = cfg_u("aging.after_ns");
        }
        c.initial_service_ns = cfg_u("initial_service_ns");
        c.service_alpha = cfg_f("service_alpha");
        c.fallback_retry_after_ns = cfg_u("fallback_retry_after_ns");
        ok(sg_gate_new(&c, &gate), "sg_gate_new");
    } else if (strcmp(kind, "retry_budget") == 0) {
        sg_retry_budget_config c;
        ok(sg_retry_budget_config_default(&c), "default");
        c.ttl_ns = cfg_u("ttl_ns");
        c.min_retries_per_sec = (uint32_t)cfg_u("min_retries_per_sec");
        c.percent_can_retry = cfg_f("percent_can_retry");
        ok(PLACED_NEW(retry_budget, &c, &budget), "sg_retry_budget_new");
    } else if (strcmp(kind, "token_throttle") == 0) {
        sg_token_throttle_config c;
        ok(sg_token_throttle_config_default(&c), "default");
        c.max_tokens = cfg_f("max_tokens");
        c.token_ratio = cfg_f("token_ratio");
        ok(sg_token_throttle_new(&c, &token), "sg_token_throttle_new");
    } else if (strcmp(kind, "adaptive_throttle") == 0) {
        sg_adaptive_throttle_config c;
        ok(sg_adaptive_throttle_config_default(&c), "default");
        c.k = cfg_f("k");
        c.window_ns = cfg_u("window_ns");
        c.max_drop_probability = cfg_f("max_drop_probability");
        c.form = strcmp(cfg_s("form"), "ema") == 0 ? SG_THROTTLE_FORM_EMA : SG_THROTTLE_FORM_RING;
        ok(sg_adaptive_throttle_new(&c, &adaptive), "sg_adaptive_throttle_new");
    } else if (strcmp(kind, "backoff") == 0) {
        sg_backoff_config c;
        ok(sg_backoff_config_default(&c), "default");
        c.base_ns = cfg_u("base_ns");
        c.multiplier = cfg_f("multiplier");
        c.cap_ns = cfg_u("cap_ns");
        const char *j = cfg_s("jitter");
        c.jitter = strcmp(j, "none") == 0      ? SG_JITTER_NONE
                   : strcmp(j, "equal") == 0   ? SG_JITTER_EQUAL
                   : strcmp(j, "decorrelated") == 0 ? SG_JITTER_DECORRELATED
                                               : SG_JITTER_FULL;
        c.seed = cfg_u("seed");
        ok(sg_backoff_new(&c, &backoff), "sg_backoff_new");
    } else if (strcmp(kind, "breaker") == 0) {
        sg_breaker_config c;
        ok(sg_breaker_config_default(&c), "default");
        c.window_kind = strcmp(cfg_s("window"), "time") == 0 ? SG_BREAKER_WINDOW_TIME : SG_BREAKER_WINDOW_COUNT;
        c.window_count = (uint32_t)cfg_u("window_calls");
        c.window_ns = cfg_u("window_ns");
        c.failure_rate_threshold = cfg_f("failure_rate_threshold");
        c.slow_call_rate_threshold = cfg_f("slow_call_rate_threshold");
        c.slow_call_duration_ns = cfg_u("slow_call_ns");
        c.minimum_calls = (uint32_t)cfg_u("minimum_calls");
        c.open_duration_ns = cfg_u("open_ns");
        c.open_jitter = cfg_f("open_jitter");
        c.half_open_probes = (uint32_t)cfg_u("half_open_probes");
        c.probe_lease_ns = cfg_u("probe_lease_ns");
        c.ramp_duration_ns = cfg_u("ramp_ns");
        c.seed = cfg_u("seed");
        ok(sg_breaker_new(&c, &breaker), "sg_breaker_new");
    } else if (strcmp(kind, "rate_limiter") == 0) {
        sg_rate_limiter_config c;
        ok(sg_rate_limiter_config_default(&c), "default");
        c.per_second = cfg_f("per_second");
        c.burst = (uint32_t)cfg_u("burst");
        c.emission_ns = 0;
        ok(PLACED_NEW(rate_limiter, &c, &rate), "sg_rate_limiter_new");
    } else if (strcmp(kind, "credits") == 0) {
        sg_credits_config c;
        ok(sg_credits_config_default(&c), "default");
        c.capacity = (uint32_t)cfg_u("capacity");
        c.low_water = (uint32_t)cfg_u("low_water");
        ok(sg_credits_new(&c, &credits), "sg_credits_new");
    } else if (strcmp(kind, "lag_meter") == 0) {
        /* The C meter's snapshot count is fixed (SG_LAG_METER_SNAPSHOTS). */
        if (cfg_u("snapshots") != SG_LAG_METER_SNAPSHOTS) die("config", "snapshots", cfg_s("snapshots"), "SG_LAG_METER_SNAPSHOTS");
        sg_lag_meter_config c;
        ok(sg_lag_meter_config_default(&c), "default");
        c.bucket_ns = cfg_u("bucket_ns");
        ok(sg_lag_meter_new(&c, &lagm), "sg_lag_meter_new");
    } else if (strcmp(kind, "watermarks") == 0) {
        sg_watermarks_config c;
        ok(sg_watermarks_config_default(&c), "default");
        c.capacity = cfg_u("capacity");
        c.pause_below = cfg_u("pause_below");
        c.resume_above = cfg_u("resume_above");
        ok(sg_watermarks_new(&c, &wm), "sg_watermarks_new");
    } else if (strcmp(kind, "paced_drain") == 0) {
        sg_paced_drain_config c;
        ok(sg_paced_drain_config_default(&c), "default");
        c.target_per_sec = cfg_f("target_per_sec");
        c.headroom = cfg_f("headroom");
        c.burst = (uint32_t)cfg_u("burst");
        ok(sg_paced_drain_new(&c, &drain), "sg_paced_drain_new");
    } else if (strcmp(kind, "keyed") == 0) {
        sg_keyed_config c;
        ok(sg_keyed_config_default(&c), "default");
        c.shards = (uint32_t)cfg_u("shards");
        c.shards_per_key = (uint32_t)cfg_u("shards_per_key");
        c.shard_limit = (uint32_t)cfg_u("shard_limit");
        c.limit_retry_after_ns = cfg_u("limit_retry_after_ns");
        c.seed = keyed_seed = cfg_u("seed");
        const char *r = cfg_s("rate_per_second");
        c.rate_per_second = is_null(r) ? 0.0 : to_f(r); /* 0: no rate */
        c.rate_burst = (uint32_t)cfg_u("rate_burst");
        ok(PLACED_NEW(keyed, &c, &keyed), "sg_keyed_new");
    } else if (strcmp(kind, "deadline") == 0) {
        deadline_kind = true; /* pure functions: no object */
    } else {
        die("scenario", "kind", "a known kind", kind);
    }
}

static void teardown(void) {
    /* Release what is still held so valgrind sees no leak of the objects' own memory. */
    sg_limiter_free(lim);
    sg_gate_free(gate);
    sg_retry_budget_free(budget);
    sg_token_throttle_free(token);
    sg_adaptive_throttle_free(adaptive);
    sg_backoff_free(backoff);
    sg_breaker_free(breaker);
    sg_rate_limiter_free(rate);
    sg_credits_free(credits);
    sg_lag_meter_free(lagm);
    sg_watermarks_free(wm);
    sg_paced_drain_free(drain);
    sg_keyed_free(keyed);
    lim = NULL, gate = NULL, budget = NULL, token = NULL, adaptive = NULL, backoff = NULL;
    breaker = NULL, rate = NULL, credits = NULL, lagm = NULL, wm = NULL, drain = NULL;
    keyed = NULL;
    deadline_kind = false;
    free(permits), free(acquired), free(tickets), free(queued);
    permits = NULL, acquired = NULL, tickets = NULL, queued = NULL;
}

static const char *state_name(uint32_t s) {
    switch (s) {
        case SG_BREAKER_CLOSED: return "closed";
        case SG_BREAKER_RAMPING: return "ramping";
        case SG_BREAKER_OPEN: return "open";
        default: return "half_open";
    }
}

typedef struct ev {
    uint64_t step;
    bool granted;
    uint32_t reason;
    uint64_t retry_after;
} ev;

static int by_step(const void *a, const void *b) {
    const ev *x = a, *y = b;
    return x->step < y->step ? -1 : x->step > y->step;
}

/* Polls the gate at `now` until it has nothing more; compares the events (sorted by
 * ticket step) with `events`. */
static void gate_poll(uint64_t now) {
    static ev evs[4096];
    size_t nev = 0;
    sg_gate_event buf[16];
    for (;;) {
        size_t n = 0;
        ok(sg_gate_poll(gate, now, buf, 16, &n), "sg_gate_poll");
        for (size_t i = 0; i < n; i++) {
            size_t s = 0;
            while (s <= nsteps && !(queued[s] && tickets[s] == buf[i].ticket)) s++;
            if (s > nsteps) die("event", "ticket", "a waiting ticket", "an unknown one");
            queued[s] = false;
            evs[nev].step = s;
            evs[nev].granted = buf[i].kind == SG_EVENT_GRANTED;
            evs[nev].reason = buf[i].rejection.reason;
            evs[nev].retry_after = buf[i].rejection.retry_after_ns;
            if (evs[nev].granted) ok(sg_permit_move(&buf[i].permit, &permits[s]), "sg_permit_move");
            nev++;
        }
        if (n < 16) break;
    }
    qsort(evs, nev, sizeof *evs, by_step);
    static char out[65536];
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < nev; i++) {
        if (evs[i].granted) {
            used += (size_t)snprintf(out + used, sizeof out - used, "%s%llu:granted", i ? ";" : "",
                                     (unsigned long long)evs[i].step);
        } else {
            used += (size_t)snprintf(out + used, sizeof out - used, "%s%llu:%s:%llu", i ? ";" : "",
                                     (unsigned long long)evs[i].step, sg_reason_str(evs[i].reason),
                                     (unsigned long long)evs[i].retry_after);
        }
    }
    chk_s("events", nev ? out : "-");
}

/* Header values are hex in the vectors (any byte, spaces included). */
static size_t unhex(const char *h, uint8_t *out, size_t cap) {
    size_t n = strlen(h) / 2;
    if (n > cap) die("field", "value_hex", "a short value", h);
    for (size_t k = 0; k < n; k++) {
        unsigned b = 0;
        if (sscanf(h + 2 * k, "%2x", &b) != 1) die("field", "value_hex", "hex", h);
        out[k] = (uint8_t)b;
    }
    return n;
}

static void deadline_step(const char *op) {
    const char *name = find(args, nargs, "name");
    size_t name_len = name ? strlen(name) : 0;
    if (strcmp(op, "parse") == 0) {
        uint8_t value[128];
        size_t len = unhex(need(args, nargs, "value_hex"), value, sizeof value);
        uint64_t budget = 0;
        uint32_t reason = 0;
        sg_status st = sg_deadline_parse((const uint8_t *)name, name_len, value, len, &budget, &reason);
        if (st == SG_OK) {
            chk_u("budget", budget);
        } else if (st == SG_IGNORED) {
            chk_s("ignored", sg_deadline_reason_str(reason));
        } else {
            die("call", "sg_deadline_parse", "ok or ignored", sg_status_str(st));
        }
    } else if (strcmp(op, "at") == 0) {
        uint64_t d = 0;
        ok(sg_deadline_at(arg_u("now"), arg_u("budget"), &d), "sg_deadline_at");
        chk_u("deadline", d);
    } else if (strcmp(op, "format") == 0) {
        char buf[SG_DEADLINE_BUF_LEN];
        size_t n = 0;
        sg_status st = sg_deadline_format((const uint8_t *)name, name_len, arg_u("deadline"), arg_u("now"),
                                          arg_u("margin"), buf, sizeof buf, &n);
        if (st == SG_OK) {
            if (strlen(buf) != n) die("field", "value", "NUL-terminated", buf);
            chk_s("value", buf);
        } else if (st == SG_EXHAUSTED) {
            chk_s("value", "null");
        } else {
            die("call", "sg_deadline_format", "ok or exhausted", sg_status_str(st));
        }
    } else {
        die("op", op, "a deadline op", op);
    }
}

static void run_step(const char *op) {
    sg_rejection rej;
    memset(&rej, 0, sizeof rej);
    size_t i = (size_t)step_no;
    if (deadline_kind) {
        deadline_step(op);
        return;
    }
    if (lim) {
        if (strcmp(op, "acquire") == 0) {
            chk_rej(sg_limiter_try_acquire(lim, arg_u("now"), (uint32_t)arg_u("level"), &permits[i], &rej), &rej);
        } else if (strcmp(op, "release") == 0) {
            ok(sg_limiter_release(lim, &permits[arg_u("permit")], arg_u("now"), outcome_arg()), "release");
        } else if (strcmp(op, "static") == 0) {
            const char *l = need(args, nargs, "limit");
            ok(is_null(l) ? sg_limiter_clear_static_limit(lim) : sg_limiter_set_static_limit(lim, to_f(l)), "static");
        } else if (strcmp(op, "check") == 0) {
            sg_limiter_metrics m;
            ok(sg_limiter_metrics_get(lim, &m), "metrics");
            chk_f("limit", m.limit);
            chk_u("inflight", m.inflight);
            chk_list_u32("inflight_by_level", m.inflight_by_level, m.levels);
            chk_u("admitted", m.admitted);
            chk_u("rejected", m.rejected);
            chk_u("successes", m.successes);
            chk_u("drops", m.drops);
            chk_u("ignored", m.ignored);
            chk_u("windows", m.windows);
        } else {
            die("op", op, "a limiter op", op);
        }
    } else if (gate) {
        if (strcmp(op, "arrive") == 0) {
            uint64_t now = arg_u("now");
            const char *t = need(args, nargs, "timeout");
            uint64_t deadline = SG_NO_DEADLINE;
            if (!is_null(t)) deadline = now + to_u(t) < now ? UINT64_MAX : now + to_u(t);
            uint64_t ticket = 0;
            sg_status st = sg_gate_arrive(gate, now, (uint32_t)arg_u("level"), deadline, &permits[i], &ticket, &rej);
            note(st);
            if (st == SG_OK) {
                chk_s("result", "admitted");
            } else if (st == SG_REJECTED) {
                chk_s("result", "rejected");
                chk_s("reason", sg_reason_str(rej.reason));
                chk_u("retry_after", rej.retry_after_ns);
            } else if (st == SG_QUEUED) {
                chk_s("result", "queued");
                tickets[i] = ticket;
                queued[i] = true;
                gate_poll(now);
            } else {
                die("call", "sg_gate_arrive", "ok, rejected or queued", sg_status_str(st));
            }
        } else if (strcmp(op, "release") == 0) {
            uint64_t now = arg_u("now");
            ok(sg_gate_release(gate, &permits[arg_u("permit")], now, outcome_arg()), "sg_gate_release");
            uint32_t w = 0;
            ok(sg_gate_waiting_total(gate, &w), "waiting_total");
            if (w > 0) {
                gate_poll(now);
            } else {
                chk_s("events", "-");
            }
        } else if (strcmp(op, "cancel") == 0) {
            uint64_t s = arg_u("ticket");
            ok(sg_gate_cancel(gate, tickets[s]), "sg_gate_cancel");
            queued[s] = false;
        } else if (strcmp(op, "shed") == 0) {
            const char *l = need(args, nargs, "level");
            ok(is_null(l) ? sg_gate_clear_shed_level(gate) : sg_gate_set_shed_level(gate, (uint32_t)to_u(l)), "shed");
        } else if (strcmp(op, "static") == 0) {
            const char *l = need(args, nargs, "limit");
            ok(is_null(l) ? sg_gate_clear_static_limit(gate) : sg_gate_set_static_limit(gate, to_f(l)), "static");
        } else if (strcmp(op, "check") == 0) {
            static sg_gate_metrics m;
            ok(sg_gate_metrics_get(gate, &m), "metrics");
            chk_s("state", m.state == SG_GATE_HEALTHY ? "healthy" : "overloaded");
            chk_u("waiting", m.waiting);
            chk_list_u32("waiting_by_level", m.waiting_by_level, m.limiter.levels);
            chk_u("inflight", m.limiter.inflight);
            chk_f("limit", m.limiter.limit);
            if (m.shed_level == SG_NO_LEVEL) chk_s("shed_level", "null"); else chk_u("shed_level", m.shed_level);
            chk_u("queued", m.queued);
            chk_u("granted", m.granted);
            chk_u("expired", m.expired);
            chk_u("sloughed", m.sloughed);
            chk_u("evicted", m.evicted);
            chk_u("cancelled", m.cancelled);
            chk_u("shed", m.shed);
            chk_u("queue_full", m.queue_full);
            chk_u("deadline_unmeetable", m.deadline_unmeetable);
            chk_u("aged", m.aged);
        } else if (strcmp(op, "brownout") == 0) {
            double d = -1.0;
            ok(sg_gate_brownout(gate, arg_u("now"), &d), "brownout");
            chk_f("dimmer", d);
        } else {
            die("op", op, "a gate op", op);
        }
    } else if (budget) {
        if (strcmp(op, "deposit") == 0) {
            ok(sg_retry_budget_deposit(budget, arg_u("now")), "deposit");
        } else if (strcmp(op, "withdraw") == 0) {
            chk_rej(sg_retry_budget_try_withdraw(budget, arg_u("now"), &rej), &rej);
        } else if (strcmp(op, "available") == 0) {
            uint64_t a = 0;
            ok(sg_retry_budget_available(budget, arg_u("now"), &a), "available");
            chk_u("available", a);
        } else if (strcmp(op, "check") == 0) {
            sg_retry_budget_metrics m;
            ok(sg_retry_budget_metrics_get(budget, &m), "metrics");
            chk_u("requests", m.requests);
            chk_u("retries_allowed", m.retries_allowed);
            chk_u("retries_denied", m.retries_denied);
        } else {
            die("op", op, "a retry_budget op", op);
        }
    } else if (token) {
        if (strcmp(op, "record") == 0) {
            ok(sg_token_throttle_record(token, strcmp(need(args, nargs, "success"), "true") == 0), "record");
        } else if (strcmp(op, "retry") == 0) {
            chk_rej(sg_token_throttle_try_retry(token, &rej), &rej);
        } else if (strcmp(op, "check") == 0) {
            sg_token_throttle_metrics m;
            bool allowed = false;
            ok(sg_token_throttle_metrics_get(token, &m), "metrics");
            ok(sg_token_throttle_is_retry_allowed(token, &allowed), "allowed");
            chk_f("tokens", m.tokens);
            chk_b("allowed", allowed);
            chk_u("retries_allowed", m.retries_allowed);
            chk_u("retries_denied", m.retries_denied);
            chk_u("successes", m.successes);
            chk_u("failures", m.failures);
        } else {
            die("op", op, "a token_throttle op", op);
        }
    } else if (adaptive) {
        if (strcmp(op, "record") == 0) {
            ok(sg_adaptive_throttle_record(adaptive, arg_u("now"), strcmp(need(args, nargs, "accepted"), "true") == 0), "record");
        } else if (strcmp(op, "throttle") == 0) {
            chk_rej(sg_adaptive_throttle_should_throttle(adaptive, arg_u("now"), arg_u("rand"), &rej), &rej);
        } else if (strcmp(op, "probability") == 0) {
            double p = 0;
            ok(sg_adaptive_throttle_drop_probability(adaptive, arg_u("now"), &p), "probability");
            chk_f("p", p);
        } else if (strcmp(op, "check") == 0) {
            sg_adaptive_throttle_metrics m;
            ok(sg_adaptive_throttle_metrics_get(adaptive, &m), "metrics");
            chk_f("requests", m.requests);
            chk_f("accepts", m.accepts);
            chk_u("throttled", m.throttled);
        } else {
            die("op", op, "an adaptive_throttle op", op);
        }
    } else if (backoff) {
        uint64_t d = 0;
        if (strcmp(op, "delay") == 0) {
            const char *h = need(args, nargs, "hint");
            ok(sg_backoff_next_delay(backoff, (uint32_t)arg_u("attempt"), is_null(h) ? 0 : to_u(h), &d), "delay");
            chk_u("delay", d);
        } else if (strcmp(op, "ceiling") == 0) {
            ok(sg_backoff_ceiling(backoff, (uint32_t)arg_u("attempt"), &d), "ceiling");
            chk_u("ceiling", d);
        } else if (strcmp(op, "reset") == 0) {
            ok(sg_backoff_reset(backoff), "reset");
        } else {
            die("op", op, "a backoff op", op);
        }
    } else if (breaker) {
        if (strcmp(op, "acquire") == 0) {
            uint64_t now = arg_u("now");
            sg_status st = sg_breaker_try_acquire(breaker, now, &permits[i], &rej);
            chk_rej(st, &rej);
            if (st == SG_OK) {
                sg_permit_info info;
                ok(sg_permit_info_get(&permits[i], &info), "info");
                chk_b("probe", info.is_probe);
                acquired[i] = now;
            }
        } else if (strcmp(op, "record") == 0) {
            uint64_t now = arg_u("now"), p = arg_u("permit");
            uint64_t latency = now > acquired[p] ? now - acquired[p] : 0;
            if (latency != arg_u("latency")) die("argument", "latency", need(args, nargs, "latency"), "now - acquired");
            ok(sg_breaker_record(breaker, &permits[p], now, outcome_arg(), latency), "record");
        } else if (strcmp(op, "state") == 0) {
            uint32_t s = 0;
            ok(sg_breaker_state(breaker, arg_u("now"), &s), "state");
            chk_s("state", state_name(s));
        } else if (strcmp(op, "check") == 0) {
            sg_breaker_metrics m;
            ok(sg_breaker_metrics_get(breaker, arg_u("now"), &m), "metrics");
            chk_s("state", state_name(m.state));
            chk_u("admit_permille", m.admit_permille);
            chk_u("window_calls", m.window_calls);
            chk_u("window_failures", m.window_failures);
            chk_u("window_slow", m.window_slow);
            chk_u("opened", m.opened);
            chk_u("half_opened", m.half_opened);
            chk_u("closed", m.closed);
            chk_u("rejected", m.rejected);
            chk_u("ramp_shed", m.ramp_shed);
            chk_u("probes", m.probes);
        } else {
            die("op", op, "a breaker op", op);
        }
    } else if (rate) {
        if (strcmp(op, "check") == 0) {
            chk_rej(sg_rate_limiter_check(rate, arg_u("now"), (uint32_t)arg_u("cost"), &rej), &rej);
        } else if (strcmp(op, "take_up_to") == 0) {
            uint32_t n = 0;
            ok(sg_rate_limiter_take_up_to(rate, arg_u("now"), (uint32_t)arg_u("max"), &n), "take_up_to");
            chk_u("n", n);
        } else if (strcmp(op, "available") == 0) {
            uint32_t n = 0;
            ok(sg_rate_limiter_available(rate, arg_u("now"), &n), "available");
            chk_u("n", n);
        } else if (strcmp(op, "wait") == 0) {
            uint64_t w = 0;
            ok(sg_rate_limiter_wait_time(rate, arg_u("now"), (uint32_t)arg_u("cost"), &w), "wait");
            chk_u("wait", w);
        } else if (strcmp(op, "metrics") == 0) {
            sg_rate_limiter_metrics m;
            ok(sg_rate_limiter_metrics_get(rate, &m), "metrics");
            chk_u("allowed", m.allowed);
            chk_u("denied", m.denied);
        } else {
            die("op", op, "a rate_limiter op", op);
        }
    } else if (credits) {
        uint32_t n = 0;
        if (strcmp(op, "try_take") == 0) {
            chk_rej(sg_credits_try_take(credits, (uint32_t)arg_u("k"), &rej), &rej);
        } else if (strcmp(op, "take_up_to") == 0) {
            ok(sg_credits_take_up_to(credits, (uint32_t)arg_u("k"), &n), "take_up_to");
            chk_u("n", n);
        } else if (strcmp(op, "complete") == 0) {
            /* Completing more than is buffered: SG_ALREADY_RELEASED, nothing changed (the
             * vectors' next `check` shows the state). */
            sg_status st = sg_credits_complete(credits, (uint32_t)arg_u("k"));
            if (st != SG_OK && st != SG_ALREADY_RELEASED) die("status", "complete", "ok or already released", sg_status_str(st));
            chk_b("ok", st == SG_OK);
            if (st == SG_ALREADY_RELEASED) chk_s("error", "already_released");
        } else if (strcmp(op, "grant") == 0) {
            ok(sg_credits_grant(credits, (uint32_t)arg_u("n"), &n), "grant");
            chk_u("n", n);
        } else if (strcmp(op, "grant_due") == 0) {
            ok(sg_credits_grant_due(credits, &n), "grant_due");
            chk_u("n", n);
        } else if (strcmp(op, "replenish") == 0) {
            ok(sg_credits_replenish(credits, &n), "replenish");
            chk_u("n", n);
        } else if (strcmp(op, "check") == 0) {
            uint32_t a = 0, b = 0, o = 0;
            bool stalled = false;
            ok(sg_credits_available(credits, &a), "available");
            ok(sg_credits_buffered(credits, &b), "buffered");
            ok(sg_credits_outstanding(credits, &o), "outstanding");
            ok(sg_credits_is_stalled(credits, &stalled), "is_stalled");
            chk_u("available", a);
            chk_u("buffered", b);
            chk_u("outstanding", o);
            chk_b("stalled", stalled);
        } else if (strcmp(op, "metrics") == 0) {
            sg_credits_metrics m;
            ok(sg_credits_metrics_get(credits, &m), "metrics");
            chk_u("granted", m.granted);
            chk_u("taken", m.taken);
            chk_u("completed", m.completed);
            chk_u("refused", m.refused);
            chk_u("available", m.available);
            chk_u("buffered", m.buffered);
            chk_u("stalled", m.stalled);
            chk_u("capacity", m.capacity);
        } else {
            die("op", op, "a credits op", op);
        }
    } else if (lagm) {
        uint64_t now = arg_u("now"), v = 0;
        sg_lag_metrics m;
        if (strcmp(op, "record_produced") == 0) {
            ok(sg_lag_meter_record_produced(lagm, now, arg_u("n")), "record_produced");
        } else if (strcmp(op, "record_consumed") == 0) {
            ok(sg_lag_meter_record_consumed(lagm, now, arg_u("n")), "record_consumed");
        } else if (strcmp(op, "observe_totals") == 0) {
            ok(sg_lag_meter_observe_totals(lagm, now, arg_u("produced"), arg_u("consumed")), "observe_totals");
        } else if (strcmp(op, "report_oldest") == 0) {
            const char *at = need(args, nargs, "enqueued_at");
            ok(is_null(at) ? sg_lag_meter_clear_oldest(lagm, now) : sg_lag_meter_report_oldest(lagm, now, to_u(at)), "report_oldest");
        } else if (strcmp(op, "lag") == 0) {
            ok(sg_lag_meter_lag(lagm, now, &v), "lag");
            chk_u("lag", v);
        } else if (strcmp(op, "produce_rate") == 0 || strcmp(op, "consume_rate") == 0) {
            /* C has no rate getters: the snapshot at `now` holds them (its tick is the same). */
            ok(sg_lag_meter_metrics_get(lagm, now, &m), "metrics");
            if (!m.rates_known) chk_s("rate", "null");
            else chk_f("rate", op[0] == 'p' ? m.produce_rate : m.consume_rate);
        } else if (strcmp(op, "lag_time") == 0) {
            ok(sg_lag_meter_lag_time(lagm, now, &v), "lag_time");
            chk_never("lag_time", v);
        } else if (strcmp(op, "time_to_drain") == 0) {
            ok(sg_lag_meter_time_to_drain(lagm, now, &v), "time_to_drain");
            chk_never("time_to_drain", v);
        } else if (strcmp(op, "time_to_drain_exceeds") == 0) {
            bool b = false;
            ok(sg_lag_meter_time_to_drain_exceeds(lagm, now, arg_u("limit"), &b), "exceeds");
            chk_b("exceeds", b);
        } else if (strcmp(op, "oldest_age") == 0) {
            ok(sg_lag_meter_metrics_get(lagm, now, &m), "metrics");
            if (m.has_oldest_age) chk_u("oldest_age", m.oldest_age_ns); else chk_s("oldest_age", "null");
        } else if (strcmp(op, "metrics") == 0) {
            ok(sg_lag_meter_metrics_get(lagm, now, &m), "metrics");
            chk_u("produced", m.produced);
            chk_u("consumed", m.consumed);
            chk_u("lag", m.lag);
            chk_b("rates_known", m.rates_known);
            chk_f("produce_rate", m.produce_rate);
            chk_f("consume_rate", m.consume_rate);
            chk_finf("lag_seconds", m.lag_seconds);
            chk_finf("time_to_drain_seconds", m.time_to_drain_seconds);
            if (m.has_oldest_age) chk_u("oldest_age", m.oldest_age_ns); else chk_s("oldest_age", "null");
        } else {
            die("op", op, "a lag_meter op", op);
        }
    } else if (wm) {
        if (strcmp(op, "observe") == 0) {
            uint32_t t = 0;
            ok(sg_watermarks_observe(wm, arg_u("now"), arg_u("level"), &t), "observe");
            chk_s("transition", t == SG_TRANSITION_PAUSE ? "pause" : t == SG_TRANSITION_RESUME ? "resume" : "null");
        } else if (strcmp(op, "is_paused") == 0) {
            bool b = false;
            ok(sg_watermarks_is_paused(wm, &b), "is_paused");
            chk_b("paused", b);
        } else if (strcmp(op, "metrics") == 0) {
            sg_watermarks_metrics m;
            ok(sg_watermarks_metrics_get(wm, arg_u("now"), &m), "metrics");
            chk_b("paused", m.paused);
            chk_u("pauses", m.pauses);
            chk_u("resumes", m.resumes);
            chk_u("time_paused", m.time_paused_ns);
            chk_u("last_level", m.last_level);
        } else {
            die("op", op, "a watermarks op", op);
        }
    } else if (drain) {
        if (strcmp(op, "permits") == 0) {
            uint32_t n = 0;
            ok(sg_paced_drain_permits(drain, arg_u("now"), arg_u("backlog"), &n), "permits");
            chk_u("n", n);
        } else if (strcmp(op, "next_permit_in") == 0) {
            uint64_t w = 0;
            ok(sg_paced_drain_next_permit_in(drain, arg_u("now"), &w), "next_permit_in");
            chk_u("wait", w);
        } else if (strcmp(op, "time_to_drain") == 0) {
            uint64_t t = 0;
            ok(sg_paced_drain_time_to_drain(drain, arg_u("backlog"), to_f(need(args, nargs, "produce_per_sec")), &t), "time_to_drain");
            chk_never("time_to_drain", t);
        } else if (strcmp(op, "metrics") == 0) {
            sg_paced_drain_metrics m;
            ok(sg_paced_drain_metrics_get(drain, &m), "metrics");
            chk_u("started", m.started);
            chk_u("calls", m.calls);
            chk_f("drain_per_sec", m.drain_per_sec);
        } else {
            die("op", op, "a paced_drain op", op);
        }
    } else if (keyed) {
        /* Keys are hashed the way every binding hashes them: hash_key(seed, utf8(key)). */
        uint64_t h = 0;
        if (strcmp(op, "acquire") == 0 || strcmp(op, "hash") == 0 || strcmp(op, "shards_of") == 0 ||
            strcmp(op, "record_rejection") == 0) {
            const char *key = need(args, nargs, "key");
            ok(sg_keyed_hash_key(keyed_seed, (const uint8_t *)key, strlen(key), &h), "sg_keyed_hash_key");
        }
        if (strcmp(op, "acquire") == 0) {
            chk_rej(sg_keyed_try_acquire(keyed, h, arg_u("now"), (uint32_t)arg_u("cost"), &permits[i], &rej), &rej);
        } else if (strcmp(op, "release") == 0) {
            ok(sg_keyed_release(keyed, &permits[arg_u("permit")]), "sg_keyed_release");
        } else if (strcmp(op, "hash") == 0) {
            chk_u("hash", h);
        } else if (strcmp(op, "shards_of") == 0) {
            uint32_t sh[SG_MAX_SHARDS_PER_KEY];
            size_t n = 0;
            ok(sg_keyed_shards_of(keyed, h, sh, SG_MAX_SHARDS_PER_KEY, &n), "shards_of");
            chk_list_u32("shards", sh, n);
        } else if (strcmp(op, "record_rejection") == 0) {
            bool rec = false;
            ok(sg_keyed_record_rejection(keyed, h, &rec), "record_rejection");
            chk_b("recorded", rec);
        } else if (strcmp(op, "metrics") == 0) {
            static sg_keyed_metrics m;
            uint64_t key_limit = 0;
            ok(sg_keyed_metrics_get(keyed, &m), "metrics");
            ok(sg_keyed_key_limit(keyed, &key_limit), "key_limit");
            chk_u("admitted", m.admitted);
            chk_u("rejected_key_limit", m.rejected_key_limit);
            chk_u("rejected_key_rate", m.rejected_key_rate);
            chk_u("foreign_releases", m.foreign_releases);
            chk_u("in_flight", m.in_flight);
            chk_u("full_shards", m.full_shards);
            chk_u("key_limit", key_limit);
            char top[16 * 64] = "";
            size_t used = 0;
            for (size_t k = 0; k < SG_KEYED_TOP_KEYS && m.top_keys[k].count > 0; k++) {
                used += (size_t)snprintf(top + used, sizeof top - used, "%s%016llx:%llu:%llu", k ? ";" : "",
                                         (unsigned long long)m.top_keys[k].key_hash,
                                         (unsigned long long)m.top_keys[k].count,
                                         (unsigned long long)m.top_keys[k].error);
            }
            chk_s("top_keys", used ? top : "-");
        } else {
            die("op", op, "a keyed op", op);
        }
    }
}

/* Splits `line` at spaces into `key=value` pairs (tokens without '=' are skipped). */
static size_t split_kv(char *line, kv *out) {
    size_t n = 0;
    for (char *tok = strtok(line, " \n"); tok; tok = strtok(NULL, " \n")) {
        char *eq = strchr(tok, '=');
        if (!eq) continue;
        if (n == MAX_TOK) die("line", "tokens", "fewer", "too many");
        *eq = '\0';
        out[n].key = tok;
        out[n].val = eq + 1;
        n++;
    }
    return n;
}

int main(int argc, char **argv) {
    int argi = 1;
    if (argc > argi && strcmp(argv[argi], "--shared") == 0) {
        shared_placement = true;
        argi++;
    }
    const char *path = argc > argi ? argv[argi] : "tests/vectors/vectors.txt";
    FILE *fp = fopen(path, "r");
    if (!fp) {
        perror(path);
        return 1;
    }
    char *line = NULL, *cfgline = NULL;
    size_t cap = 0;
    unsigned long scenarios = 0, refused_steps = 0, skipped_steps = 0;
    bool header = false, skip_scenario = false;
    while (getline(&line, &cap, fp) != -1) {
        if (line[0] == '#' || line[0] == '\n') continue;
        if (strncmp(line, "format ", 7) == 0) {
            if (strcmp(line, "format surgeguard-vectors 1\n") != 0) die("header", "format", "surgeguard-vectors 1", line);
            header = true;
        } else if (strncmp(line, "scenario ", 9) == 0) {
            if (sscanf(line, "scenario %255s %63s %zu", scenario, kind, &nsteps) != 3) die("line", "scenario", "name kind steps", line);
            scenarios++;
            skip_scenario = false;
        } else if (strncmp(line, "config ", 7) == 0) {
            free(cfgline);
            cfgline = strdup(line + 7);
            ncfg = split_kv(cfgline, cfg);
            build();
        } else if (strncmp(line, "step ", 5) == 0) {
            char *bar = strstr(line, " | ");
            if (!bar) die("line", "step", "args | expect", line);
            *bar = '\0';
            char op[64];
            if (sscanf(line, "step %lu %63s", &step_no, op) != 2) die("line", "step", "index op", line);
            nargs = split_kv(line, args);
            nexps = split_kv(bar + 3, exps);
            nchecked = 0;
            if (skip_scenario) {
                skipped_steps++;
                continue;
            }
            const char *now_arg = find(args, nargs, "now"), *attempt = find(args, nargs, "attempt");
            refusal_expected = SG_OK;
            if (now_arg != NULL && to_u(now_arg) > SG_MAX_NOW) {
                refusal_expected = SG_TIME_OUT_OF_RANGE;
            } else if (attempt != NULL && to_u(attempt) == 0) {
                refusal_expected = SG_INVALID_ARGUMENT;
            }
            if (setjmp(refused) != 0) {
                /* Refused as it must be; the rest of the scenario assumed it acted. */
                refusal_expected = SG_OK;
                refused_steps++;
                skip_scenario = true;
                continue;
            }
            run_step(op);
            if (refusal_expected != SG_OK) die("status", op, sg_status_str(refusal_expected), "a call that went ahead");
            if (nchecked != nexps) {
                char buf[64];
                snprintf(buf, sizeof buf, "%zu of %zu fields compared", nchecked, nexps);
                die("fields", op, "every expected field compared", buf);
            }
            total_steps++;
        } else if (strncmp(line, "end", 3) == 0) {
            teardown();
        } else {
            die("line", "kind", "format/scenario/config/step/end", line);
        }
    }
    free(line);
    free(cfgline);
    fclose(fp);
    if (!header || scenarios == 0) {
        fprintf(stderr, "replay_vectors: %s holds no vectors\n", path);
        return 1;
    }
    printf("replay_vectors: placement %s\n", shared_placement ? "shared" : "local");
    printf("replay_vectors: %lu scenarios replayed; %lu stop at a step the C ABI refuses by "
           "design (a now above SG_MAX_NOW, a backoff attempt 0; %lu later steps not compared)\n",
           scenarios, refused_steps, skipped_steps);
    printf("replay_vectors: %lu passed, 0 failed\n", total_steps);
    return 0;
}
