/* A seeded random-argument sweep of the whole C ABI, run under valgrind by run.sh.
 *
 * Each iteration calls one function of include/surgeguard.h, picked at random, with
 * hostile arguments: NULL pointers, NaN, ±inf, 0, negative values cast to unsigned,
 * UINT64_MAX, a `now` above SG_MAX_NOW, handles that are NULL, of another type or ended
 * (deinitialised storage), configs with random fields (reserved words included) set to
 * such values, permits that are zeroed, garbage, released, or another object's, tickets
 * that were never issued. The call table comes from the header (gen_sweep.py), so every
 * function is swept. After each call it checks the contract every function promises:
 *   - the status is a documented one (0..5, 100..115), and never a success when a
 *     `now` above SG_MAX_NOW was passed;
 *   - a failure (a status >= 100) writes no output (outputs start as a 0xA5 canary, and
 *     a permit output keeps its state), and changes no observable state (a fingerprint of
 *     every field of the object's metrics, before and after);
 *   - nothing crashes or leaks (valgrind memcheck, every object ended at the end).
 *
 * Usage: sweep_api [iterations [seed]]; SG_SWEEP_ITERS / SG_SWEEP_SEED do the same.
 * Prints "sweep_api: N passed, N failed" last. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "surgeguard.h"

/* ---- randomness: SplitMix64, seeded -------------------------------------------------- */
static uint64_t rng_state;
static uint64_t next_u64(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
#define ONE_IN(n) (next_u64() % (n) == 0)

static const uint64_t hostile_u64[] = {
    0, 1, 2, 3, 7, 8, 9, 100, 1000, 1000000, 1000000000, 4294967295ull, 4294967296ull,
    9007199254740993ull, SG_MAX_NOW - 1, SG_MAX_NOW, SG_MAX_NOW + 1, 9223372036854775807ull,
    9223372036854775808ull, UINT64_MAX - 1, UINT64_MAX, (uint64_t)-1000, (uint64_t)-1};
static uint64_t U64(void) {
    return ONE_IN(3) ? next_u64() >> (next_u64() % 64)
                     : hostile_u64[next_u64() % (sizeof hostile_u64 / sizeof hostile_u64[0])];
}
static const uint32_t hostile_u32[] = {0, 1, 2, 3, 4, 5, 7, 8, 9, 14, 15, 16, 64, 255, 256,
                                       429, 503, 1024, 4096, 4097, 2147483647u,
                                       2147483648u, UINT32_MAX - 1, UINT32_MAX};
static uint32_t U32(void) {
    return ONE_IN(3) ? (uint32_t)(next_u64() >> (next_u64() % 64))
                     : hostile_u32[next_u64() % (sizeof hostile_u32 / sizeof hostile_u32[0])];
}
static double F64(void) {
    static const double d[] = {0.0, -0.0, 1e-300, 1e-6, 0.001, 0.1, 0.5, 0.9, 0.999, 1.0,
                               1.5, 1.8, 2.0, 3.0, 10.0, 100.0, 1e6, 1e9, 2147483648.0,
                               1e18, 1e300, -1.0, -1e300};
    switch (next_u64() % 8) {
    case 0: return NAN;
    case 1: return ONE_IN(2) ? INFINITY : -INFINITY;
    case 2: return (double)(next_u64() % 2000000) / 1000.0;
    default: return d[next_u64() % (sizeof d / sizeof d[0])];
    }
}
static bool BOOL(void) { return ONE_IN(2); }

/* `now`: mostly moving forward in range, sometimes backwards, sometimes out of range. The
 * sweep's latest in-range `now` is where fingerprints are taken. */
static uint64_t sweep_now = 1000000;
static int bad_now; /* this call got a `now` above SG_MAX_NOW: it must not succeed */
static uint64_t NOW(void) {
    uint64_t n;
    switch (next_u64() % 16) {
    case 0: bad_now = 1; return SG_MAX_NOW + 1 + next_u64() % 1000;
    case 1: bad_now = 1; return UINT64_MAX;
    case 2: return sweep_now > 5000000 ? sweep_now - next_u64() % 5000000 : 0;
    case 3: n = SG_MAX_NOW; break;
    default: n = sweep_now + next_u64() % (ONE_IN(8) ? 2000000000ull : 3000000ull); break;
    }
    if (n > SG_MAX_NOW) n = SG_MAX_NOW;
    if (n > sweep_now) sweep_now = n;
    return n;
}

/* ---- results ----------------------------------------------------------------------- */
static unsigned long passed, failed, iteration;
static unsigned long by_status[116];
static void fail_at(const char *fn, const char *what) {
    failed++;
    if (failed <= 30) fprintf(stderr, "sweep_api: iteration %lu: %s: %s\n", iteration, fn, what);
}
#define SAME(cond, fn, what)       \
    do {                           \
        if (cond) {                \
            passed++;              \
        } else {                   \
            fail_at((fn), (what)); \
        }                          \
    } while (0)

static void check_status(sg_status st, const char *fn) {
    unsigned s = (unsigned)st;
    int documented = s <= 5 || (s >= 100 && s <= 115);
    SAME(documented, fn, "returned an undocumented status");
    if (bad_now) SAME(s >= 100, fn, "accepted a now above SG_MAX_NOW");
    if (documented) by_status[s]++;
}
static int canary(const void *p, size_t n) {
    const unsigned char *b = (const unsigned char *)p;
    size_t i;
    for (i = 0; i < n; i++) {
        if (b[i] != 0xA5) return 0;
    }
    return 1;
}
static void *OUTP_(void *p) { return ONE_IN(16) ? NULL : p; }
#define OUTP(p) (ONE_IN(16) ? NULL : (p))

/* ---- fingerprints over every field ---------------------------------------------------- */
static uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001B3ull + 0x9E37ull; }
static uint64_t bits_of(double d) {
    uint64_t u;
    if (d != d) return 0x7FF8000000000000ull; /* one NaN */
    memcpy(&u, &d, sizeof u);
    return u;
}
#define FOLD_uint64_t(x) ((uint64_t)(x))
#define FOLD_uint32_t(x) ((uint64_t)(x))
#define FOLD_uint16_t(x) ((uint64_t)(x))
#define FOLD_uint8_t(x) ((uint64_t)(x))
#define FOLD_size_t(x) ((uint64_t)(x))
#define FOLD_bool(x) ((uint64_t)((x) ? 1 : 0))
#define FOLD_double(x) bits_of(x)

/* ---- the objects --------------------------------------------------------------------- */
struct pool_entry;
static void note_ticket(uint64_t t);
static void take_events(void *gate, sg_gate_event *ev, size_t n);
static void *H(int t);
static void *retire_candidate(int t, int for_free);
static void retire_done(sg_status st);
static void *storage_for(size_t size, size_t align, void **base);
static sg_permit *SLOT_FREE(void);
static sg_permit *SLOT_ANY(void);
static int permit_state(const sg_permit *p);
static uint64_t TICKET(void);

#define BEFORE(t, h)         \
    uint64_t fpb_ = 0;       \
    int hasfp_ = fingerprint((t), (h), &fpb_)
#define AFTER(t, h, st, fn)                                                           \
    do {                                                                              \
        if (hasfp_ && (unsigned)(st) >= 100) {                                        \
            uint64_t fpa_ = 0;                                                        \
            SAME(fingerprint((t), (h), &fpa_) && fpa_ == fpb_, (fn),                  \
                 "a failing call changed the object's state");                        \
        }                                                                             \
    } while (0)

/* Names for sg_*_open_shared / _unlink_shared: see the definition below. */
static const char *SHARED_NAME(void);

/* The shared gate (Linux): see the definitions below. */
static sg_shared_gate *SGATE_FRESH(void);
static sg_shared_gate *SGATE_H(void);
static sg_shared_gate_permit *SGATE_SLOT_FREE(void);
static sg_shared_gate_permit *SGATE_SLOT_ANY(void);
static const sg_shared_ticket *SGATE_TICKET(void);
static uint64_t sgate_fp(const sg_shared_gate *h);
static void sgate_issued(sg_shared_gate *h, sg_shared_gate_permit *p);
static void sgate_released(sg_shared_gate_permit *p);
static void sgate_note_ticket(sg_shared_gate *h, const sg_shared_ticket *t);

#include "sweep_calls.inc"

/* Names that are never valid (so the sweep creates and unlinks no file), or NULL (an
 * anonymous segment, freed after the call). */
static char shared_long_name[256];
static const char *SHARED_NAME(void) {
    static const char *const names[] = {NULL, "", "bad name", ".", "..", "a\xff", "a*b", shared_long_name};
    return names[next_u64() % (sizeof names / sizeof names[0])];
}
/* Two live anonymous shared gates (limit 2), permit slots with a shadow of which are
 * live (and whose), and the tickets their arrivals queued (cancelled or taken at the
 * end). */
#define SGATE_SLOTS 8
#define SGATE_TICKETS 64
static sg_shared_gate *sgate_live, *sgate_other;
static sg_shared_gate_permit sgate_slots[SGATE_SLOTS], sgate_garbage;
static sg_shared_gate *sgate_owner[SGATE_SLOTS]; /* NULL: not live */
static sg_shared_ticket sgate_tickets[SGATE_TICKETS], sgate_bogus;
static sg_shared_gate *sgate_ticket_gate[SGATE_TICKETS];
static unsigned sgate_n_tickets;
static sg_shared_gate *sgate_open(void) {
    sg_gate_config c;
    sg_shared_gate *h = NULL;
    if (sg_gate_config_default(&c) != SG_OK) abort();
    c.limiter.algorithm = SG_ALGORITHM_FIXED;
    c.limiter.fixed.initial_limit = 2;
    c.limiter.fixed.min_limit = 1;
    c.limiter.fixed.max_limit = 2;
    if (sg_shared_gate_open(NULL, &c, &h) != SG_OK) abort();
    return h;
}
static sg_shared_gate *SGATE_FRESH(void) { return ONE_IN(4) ? NULL : sgate_open(); }
static sg_shared_gate *SGATE_H(void) {
    switch (next_u64() % 16) {
    case 0: return NULL;
    case 1: return (sg_shared_gate *)H(0); /* a handle of another type */
    case 2: case 3: return sgate_other;
    default: return sgate_live;
    }
}
static int sgate_index(const sg_shared_gate_permit *p) {
    return p >= sgate_slots && p < sgate_slots + SGATE_SLOTS ? (int)(p - sgate_slots) : -1;
}
static sg_shared_gate_permit *SGATE_SLOT_FREE(void) {
    unsigned k;
    if (ONE_IN(16)) return NULL;
    for (k = 0; k < SGATE_SLOTS; k++) {
        if (sgate_owner[k] == NULL) return &sgate_slots[k];
    }
    return NULL;
}
static sg_shared_gate_permit *SGATE_SLOT_ANY(void) {
    size_t i;
    if (ONE_IN(16)) return NULL;
    if (ONE_IN(8)) {
        for (i = 0; i < sizeof sgate_garbage; i++) ((unsigned char *)&sgate_garbage)[i] = (unsigned char)next_u64();
        return &sgate_garbage;
    }
    return &sgate_slots[next_u64() % SGATE_SLOTS];
}
static const sg_shared_ticket *SGATE_TICKET(void) {
    size_t i;
    if (ONE_IN(16)) return NULL;
    if (sgate_n_tickets == 0 || ONE_IN(4)) {
        for (i = 0; i < sizeof sgate_bogus; i++) ((unsigned char *)&sgate_bogus)[i] = (unsigned char)next_u64();
        return &sgate_bogus;
    }
    return &sgate_tickets[next_u64() % sgate_n_tickets];
}
static uint64_t sgate_fp(const sg_shared_gate *h) {
    uint32_t inflight = 0, waiting = 0;
    double limit = 0;
    if (sg_shared_gate_inflight(h, &inflight, &waiting, &limit) != SG_OK) return 0;
    return mix(mix(inflight, waiting), bits_of(limit));
}
static void sgate_issued(sg_shared_gate *h, sg_shared_gate_permit *p) {
    int k = sgate_index(p);
    if (k < 0) abort();
    sgate_owner[k] = h;
}
static void sgate_released(sg_shared_gate_permit *p) {
    int k = sgate_index(p);
    if (k >= 0) sgate_owner[k] = NULL;
}
/* Finishes noted ticket k: withdrawn if it still waits, else its outcome taken (a grant's
 * permit released); a ticket taken or withdrawn before is refused, which changes nothing. */
static void sgate_finish(unsigned k, const char *fn) {
    sg_shared_gate_permit p;
    sg_shared_gate *g = sgate_ticket_gate[k];
    if (sg_shared_gate_cancel(g, &sgate_tickets[k]) != SG_OK &&
        sg_shared_gate_wait(g, &sgate_tickets[k], 0, &p, NULL) == SG_OK) {
        SAME(sg_shared_gate_release(g, &p, sweep_now, SG_OUTCOME_IGNORED) == SG_OK, fn,
             "a granted ticket's permit");
    }
}
/* Every queued ticket is noted, so that the end finishes it. With the table full, the oldest
 * noted ticket is finished now and its place reused (before, the tickets queued after the
 * first SGATE_TICKETS were never noted: a sweep of 2 million calls queues a few hundred, and
 * ended with them still waiting, or granted and holding their permits). */
static unsigned sgate_oldest;
static void sgate_note_ticket(sg_shared_gate *h, const sg_shared_ticket *t) {
    unsigned k = sgate_n_tickets;
    if (k < SGATE_TICKETS) {
        sgate_n_tickets++;
    } else {
        k = sgate_oldest;
        sgate_oldest = (sgate_oldest + 1) % SGATE_TICKETS;
        sgate_finish(k, "sg_shared_gate_arrive");
    }
    sgate_tickets[k] = *t;
    sgate_ticket_gate[k] = h;
}
static void sgate_teardown(void) {
    unsigned k;
    uint32_t inflight = 1, waiting = 1;
    double limit = 0;
    for (k = 0; k < SGATE_SLOTS; k++) {
        if (sgate_owner[k] != NULL) {
            SAME(sg_shared_gate_release(sgate_owner[k], &sgate_slots[k], sweep_now, SG_OUTCOME_IGNORED) == SG_OK,
                 "end", "a live shared gate permit its gate did not take back");
            sgate_owner[k] = NULL;
        }
    }
    /* Tickets still out: cancelled, or their grants taken and released. */
    for (k = 0; k < sgate_n_tickets; k++) sgate_finish(k, "end");
    SAME(sg_shared_gate_inflight(sgate_live, &inflight, &waiting, &limit) == SG_OK && inflight == 0 && waiting == 0,
         "end", "the shared gate has permits in flight or waiters after every release");
    sg_shared_gate_free(sgate_live);
    sg_shared_gate_free(sgate_other);
}
static void shared_setup(void) {
    sgate_live = sgate_open();
    sgate_other = sgate_open();
    memset(shared_long_name, 'a', sizeof shared_long_name - 1);
}

/* Per type: a heap object, one in caller storage, and ended storage (deinitialised, still
 * allocated: a stale handle that is safe to pass); for the families with a placement, one
 * in anonymous shared memory too (NULL for the others). */
static void *live_heap[N_TYPES], *live_mem[N_TYPES], *dead_mem[N_TYPES], *live_shared[N_TYPES];

static void *H(int t) {
    switch (next_u64() % 16) {
    case 0: return NULL;
    case 1: return dead_mem[t];
    case 2: return live_heap[(t + 1 + next_u64() % (N_TYPES - 1)) % N_TYPES]; /* another type */
    case 3: case 4: if (live_shared[t]) return live_shared[t]; /* fall through */
    default: return ONE_IN(2) ? live_heap[t] : live_mem[t];
    }
}

/* _free / _deinit get fresh objects (never the pool's live ones). */
static int rc_type, rc_kind, rc_for_free;
static void *rc_ptr;
static void *retire_candidate(int t, int for_free) {
    rc_type = t;
    rc_for_free = for_free;
    rc_kind = (int)(next_u64() % 4);
    switch (rc_kind) {
    case 0: rc_ptr = NULL; break;
    case 1: rc_ptr = make_heap[t](); break;
    case 2: rc_ptr = make_mem[t](); break;
    default: rc_ptr = dead_mem[t]; break;
    }
    return rc_ptr;
}
static void retire_done(sg_status st) {
    const char *fn = type_names[rc_type];
    if (rc_for_free) {
        if (rc_kind == 2) { /* a free of caller storage is ignored: it is still alive */
            end_mem[rc_type](rc_ptr);
            free(rc_ptr);
        }
        return;
    }
    switch (rc_kind) {
    case 0: SAME(st == SG_OK, fn, "deinit(NULL) is not OK"); break;
    case 1: /* deinit of a heap object is refused; free it */
        SAME(st == SG_INVALID_HANDLE, fn, "deinit of a heap object not refused");
        end_heap[rc_type](rc_ptr);
        break;
    case 2:
        SAME(st == SG_OK, fn, "deinit of live storage failed");
        free(rc_ptr);
        break;
    default: SAME(st == SG_INVALID_HANDLE, fn, "deinit of ended storage not refused"); break;
    }
}

static void *storage_for(size_t size, size_t align, void **base) {
    size_t a = align < sizeof(void *) ? sizeof(void *) : align;
    if (ONE_IN(16)) {
        *base = NULL;
        return NULL;
    }
    if (posix_memalign(base, a, size + a) != 0) abort();
    return ONE_IN(8) ? (char *)*base + 1 + next_u64() % 7 : *base; /* sometimes misaligned */
}

/* Permit slots: zeroed, live (of some object), released, or garbage. */
#define SLOTS 24
static sg_permit slots[SLOTS];
static sg_permit garbage;
static int permit_state(const sg_permit *p) {
    bool live = false;
    sg_status st;
    if (p == NULL) return 0;
    st = sg_permit_is_live(p, &live);
    return st == SG_OK ? (live ? 1 : 2) : 100 + (int)st;
}
static sg_permit *SLOT_FREE(void) {
    unsigned i, start = (unsigned)(next_u64() % SLOTS);
    if (ONE_IN(32)) return NULL;
    for (i = 0; i < SLOTS; i++) {
        sg_permit *p = &slots[(start + i) % SLOTS];
        if (permit_state(p) != 1) return p;
    }
    return NULL;
}
static sg_permit *SLOT_ANY(void) {
    if (ONE_IN(32)) return NULL;
    if (ONE_IN(16)) {
        size_t i;
        for (i = 0; i < sizeof garbage; i++) ((unsigned char *)&garbage)[i] = (unsigned char)next_u64();
        return &garbage;
    }
    return &slots[next_u64() % SLOTS];
}

/* Tickets the gates issued (some since granted, expired or cancelled). */
static uint64_t tickets[16];
static unsigned n_tickets;
static void note_ticket(uint64_t t) { tickets[n_tickets++ % 16] = t; }
static uint64_t TICKET(void) {
    if (n_tickets > 0 && !ONE_IN(3)) return tickets[next_u64() % (n_tickets < 16 ? n_tickets : 16)];
    return U64();
}

/* A granted waiter's permit goes to a free slot, or back to its gate. */
static void take_events(void *gate, sg_gate_event *ev, size_t n) {
    size_t i;
    for (i = 0; i < n; i++) {
        if (ev[i].kind == SG_EVENT_GRANTED) {
            sg_permit *slot = SLOT_FREE();
            if (slot == NULL || sg_permit_move(&ev[i].permit, slot) != SG_OK) {
                SAME(sg_gate_release((sg_gate *)gate, &ev[i].permit, sweep_now,
                                     SG_OUTCOME_IGNORED) == SG_OK,
                     "sg_gate_poll", "a granted permit could not be released");
            }
        }
    }
}

int main(int argc, char **argv) {
    unsigned long iters = 20000, seed = 1;
    int trace;
    const char *e;
    int t, i;
    unsigned called[N_FUNCTIONS] = {0};
    if ((e = getenv("SG_SWEEP_ITERS")) != NULL) iters = strtoul(e, NULL, 10);
    if ((e = getenv("SG_SWEEP_SEED")) != NULL) seed = strtoul(e, NULL, 10);
    trace = getenv("SG_SWEEP_TRACE") != NULL;
    if (argc > 1) iters = strtoul(argv[1], NULL, 10);
    if (argc > 2) seed = strtoul(argv[2], NULL, 10);
    rng_state = seed;
    (void)OUTP_;
    shared_setup();
    for (t = 0; t < N_TYPES; t++) {
        live_shared[t] = make_shared[t] ? make_shared[t]() : NULL;
        live_heap[t] = make_heap[t]();
        live_mem[t] = make_mem[t]();
        dead_mem[t] = make_mem[t]();
        end_mem[t](dead_mem[t]);
    }
    for (iteration = 0; iteration < iters; iteration++) {
        unsigned fn = (unsigned)(next_u64() % N_FUNCTIONS);
        called[fn]++;
        bad_now = 0;
        if (trace) fprintf(stderr, "sweep_api: %lu %s\n", iteration, function_names[fn]);
        call_one(fn);
    }

    /* End: every live permit back to its issuer, every waiter cancelled, every object
     * ended (valgrind then sees no leak). */
    for (i = 0; i < SLOTS; i++) {
        if (permit_state(&slots[i]) == 1) {
            int done = 0;
            for (t = 0; t < N_TYPES && !done; t++) {
                done = release_to(t, live_heap[t], &slots[i]) == SG_OK ||
                       release_to(t, live_mem[t], &slots[i]) == SG_OK ||
                       (live_shared[t] && release_to(t, live_shared[t], &slots[i]) == SG_OK);
            }
            SAME(done, "end", "a live permit no object took back");
        }
    }
    sgate_teardown();
    for (t = 0; t < N_TYPES; t++) {
        if (live_shared[t]) end_heap[t](live_shared[t]);
        end_heap[t](live_heap[t]);
        end_mem[t](live_mem[t]);
        free(live_mem[t]);
        free(dead_mem[t]);
    }
    {
        unsigned never = 0;
        for (i = 0; i < N_FUNCTIONS; i++) never += called[i] == 0;
        printf("sweep_api: seed %lu, %lu calls over %d functions (%u never drawn); statuses:",
               seed, iters, N_FUNCTIONS, never);
        for (i = 0; i < 116; i++) {
            if (by_status[i]) printf(" %s=%lu", sg_status_str((uint32_t)i), by_status[i]);
        }
        printf("\n");
    }
    printf("sweep_api: %lu passed, %lu failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
