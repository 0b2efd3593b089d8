/* 8 threads hammer one sg_gate through the C ABI: arrive, poll, release, cancel, with
 * random levels and deadlines. Checks, against the threads' own bookkeeping:
 *   - admitted ≤ limit at every instant (a counter raised after each admission and
 *     lowered before each release never exceeds the limit);
 *   - every queued ticket ends exactly once: granted, expired, or cancelled — an event for
 *     a ticket that already ended, or a cancelled one, is a failure, and so is a ticket
 *     left without an end;
 *   - the gate's own counters agree with the bookkeeping, and nothing is left in flight.
 * Events are routed by ticket: a poll may return another thread's grant (the gate's poll
 * is single-consumer and the thread inside does the others' work).
 * Usage: stress_gate [arrivals per thread] (default 4000). */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"

#define THREADS 8
#define LIMIT 4
#define TABLE_BITS 18
#define TABLE_SIZE (1u << TABLE_BITS) /* open addressing, at most half full */
#define MAX_PER_THREAD 15000

enum { WAITING = 1, GRANTED = 2, EXPIRED = 3, CANCELLED = 4, TAKEN = 5 };

/* One record per queued ticket, created by whoever sees the ticket first: the arriving
 * thread, or a poller that receives its event before the arriving thread registered it. */
typedef struct record {
    int used;
    uint64_t ticket;
    int state;
    int registered; /* the arriving thread has seen its ticket */
    int events;     /* events received for this ticket */
    sg_permit permit;
} record;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static record *records;
static size_t n_records;
static unsigned long failures_double_event, failures_event_after_cancel, failures_release;
static unsigned long failures_table_full;
static unsigned long granted_seen, expired_seen, cancelled_ok, admitted_direct, refused;

static int inflight;     /* guarded by `lock` */
static int max_inflight; /* guarded by `lock` */
static int over_limit;   /* guarded by `lock` */

static sg_gate *gate;
static unsigned long per_thread = 4000;

/* The record of `ticket`, created if new; call with `lock` held. */
static record *find_or_add(uint64_t ticket) {
    size_t i = (size_t)((ticket * 0x9E3779B97F4A7C15ull) >> (64 - TABLE_BITS));
    for (;;) {
        record *r = &records[i];
        if (!r->used) {
            if (n_records >= TABLE_SIZE / 2) {
                return NULL;
            }
            r->used = 1;
            r->ticket = ticket;
            r->state = WAITING;
            n_records++;
            return r;
        }
        if (r->ticket == ticket) {
            return r;
        }
        i = (i + 1) & (TABLE_SIZE - 1);
    }
}

static void enter(void) {
    pthread_mutex_lock(&lock);
    inflight++;
    if (inflight > max_inflight) {
        max_inflight = inflight;
    }
    if (inflight > LIMIT) {
        over_limit++;
    }
    pthread_mutex_unlock(&lock);
}

static void leave(void) {
    pthread_mutex_lock(&lock);
    inflight--;
    pthread_mutex_unlock(&lock);
}

/* Polls once and files every event under its ticket. */
static void pump(void) {
    sg_gate_event ev[8];
    size_t n = 0, i;
    if (sg_gate_poll(gate, sg_clock_now_ns(), ev, 8, &n) != SG_OK) {
        pthread_mutex_lock(&lock);
        failures_release++;
        pthread_mutex_unlock(&lock);
        return;
    }
    pthread_mutex_lock(&lock);
    for (i = 0; i < n; i++) {
        record *r = find_or_add(ev[i].ticket);
        if (r == NULL) {
            failures_table_full++;
            continue;
        }
        r->events++;
        if (r->state == CANCELLED) {
            failures_event_after_cancel++;
        } else if (r->state != WAITING) {
            failures_double_event++;
        }
        if (ev[i].kind == SG_EVENT_GRANTED) {
            granted_seen++;
            r->state = GRANTED;
            if (sg_permit_move(&ev[i].permit, &r->permit) != SG_OK) {
                failures_double_event++;
            }
        } else {
            expired_seen++;
            r->state = EXPIRED;
        }
    }
    pthread_mutex_unlock(&lock);
}

static void work(uint64_t *rng) {
    struct timespec ts = {0, 0};
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    ts.tv_nsec = (long)(*rng % 20000); /* up to 20 µs */
    nanosleep(&ts, NULL);
}

static void *worker(void *arg) {
    uint64_t rng = 0x9E3779B97F4A7C15ull * (uint64_t)((uintptr_t)arg + 1);
    unsigned long i;
    for (i = 0; i < per_thread; i++) {
        sg_permit permit;
        uint64_t ticket = 0, now = sg_clock_now_ns(), deadline = SG_NO_DEADLINE;
        uint32_t level;
        sg_status s;
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        level = (uint32_t)(rng % 3);
        if (rng % 4 == 0) {
            deadline = now + 1 * SG_MS + rng % (3 * SG_MS);
        }
        s = sg_gate_arrive(gate, now, level, deadline, &permit, &ticket, NULL);
        if (s == SG_OK) {
            pthread_mutex_lock(&lock);
            admitted_direct++;
            pthread_mutex_unlock(&lock);
            enter();
            work(&rng);
            leave();
            if (sg_gate_release(gate, &permit, sg_clock_now_ns(), SG_OUTCOME_SUCCESS) != SG_OK) {
                pthread_mutex_lock(&lock);
                failures_release++;
                pthread_mutex_unlock(&lock);
            }
            pump();
        } else if (s == SG_REJECTED) {
            pthread_mutex_lock(&lock);
            refused++;
            pthread_mutex_unlock(&lock);
        } else if (s == SG_QUEUED) {
            record *r;
            int want_cancel = (rng % 5 == 0), done = 0;
            unsigned long spins = 0;
            pthread_mutex_lock(&lock);
            r = find_or_add(ticket);
            if (r != NULL) {
                r->registered = 1;
            } else {
                failures_table_full++;
            }
            pthread_mutex_unlock(&lock);
            if (r == NULL) {
                break;
            }
            while (!done) {
                int state;
                pump();
                pthread_mutex_lock(&lock);
                state = r->state;
                pthread_mutex_unlock(&lock);
                if (state == GRANTED) {
                    sg_permit mine;
                    memset(&mine, 0, sizeof mine); /* a move's target is read: not garbage */
                    pthread_mutex_lock(&lock);
                    s = sg_permit_move(&r->permit, &mine);
                    r->state = TAKEN;
                    pthread_mutex_unlock(&lock);
                    if (s == SG_OK) {
                        enter();
                        work(&rng);
                        leave();
                        s = sg_gate_release(gate, &mine, sg_clock_now_ns(), SG_OUTCOME_SUCCESS);
                    }
                    if (s != SG_OK) {
                        pthread_mutex_lock(&lock);
                        failures_release++;
                        pthread_mutex_unlock(&lock);
                    }
                    pump();
                    done = 1;
                } else if (state == EXPIRED) {
                    done = 1;
                } else if (want_cancel && spins == 2) {
                    /* Cancel wins (no event may follow) or loses to a grant or expiry
                     * already made (UNKNOWN_TICKET: the event arrives by some poll). */
                    pthread_mutex_lock(&lock);
                    s = sg_gate_cancel(gate, ticket);
                    if (s == SG_OK) {
                        if (r->state != WAITING) {
                            failures_double_event++;
                        }
                        r->state = CANCELLED;
                        cancelled_ok++;
                        done = 1;
                    } else if (s != SG_UNKNOWN_TICKET) {
                        failures_double_event++;
                    }
                    pthread_mutex_unlock(&lock);
                } else {
                    struct timespec ts = {0, 20000};
                    nanosleep(&ts, NULL);
                }
                spins++;
            }
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    sg_gate_config cfg;
    sg_gate_metrics m;
    pthread_t threads[THREADS];
    size_t i;
    unsigned long unended = 0, unregistered = 0, multi = 0;
    uint32_t waiting = 1;
    size_t n = 0;

    if (argc > 1) {
        per_thread = strtoul(argv[1], NULL, 10);
        if (per_thread == 0 || per_thread > MAX_PER_THREAD) {
            per_thread = 4000;
        }
    }
    records = (record *)calloc(TABLE_SIZE, sizeof(record));
    CHECK(records != NULL);
    if (records == NULL) {
        return SUMMARY("stress_gate");
    }

    OK(sg_gate_config_default(&cfg));
    cfg.limiter.algorithm = SG_ALGORITHM_FIXED;
    cfg.limiter.fixed.initial_limit = LIMIT;
    cfg.limiter.fixed.min_limit = 1.0;
    cfg.limiter.fixed.max_limit = LIMIT;
    cfg.queue_capacity = 16;
    cfg.max_wait_ns = 5 * SG_MS; /* every waiter ends: granted, or expired by then */
    OK(sg_gate_new(&cfg, &gate));

    for (i = 0; i < THREADS; i++) {
        CHECK(pthread_create(&threads[i], NULL, worker, (void *)(uintptr_t)i) == 0);
    }
    for (i = 0; i < THREADS; i++) {
        pthread_join(threads[i], NULL);
    }
    /* Drain: a last poll after everyone left, then nothing may wait or be in flight. */
    {
        sg_gate_event ev[8];
        OK(sg_gate_poll(gate, sg_clock_now_ns() + SG_SEC, ev, 8, &n));
        CHECK(n == 0);
    }

    for (i = 0; i < TABLE_SIZE; i++) {
        record *r = &records[i];
        if (!r->used) {
            continue;
        }
        if (r->state == WAITING || r->state == GRANTED) {
            unended++;
        }
        if (!r->registered) {
            unregistered++;
        }
        if (r->events > 1 || (r->state == CANCELLED && r->events > 0)) {
            multi++;
        }
    }
    OK(sg_gate_metrics_get(gate, &m));
    OK(sg_gate_waiting_total(gate, &waiting));

    printf("stress_gate: %d threads x %lu arrivals, limit %d: %lu admitted at once, %lu refused, "
           "%zu queued (%lu granted, %lu expired, %lu cancelled), max in flight %d\n",
           THREADS, per_thread, LIMIT, admitted_direct, refused, n_records, granted_seen,
           expired_seen, cancelled_ok, max_inflight);
    CHECK(max_inflight <= LIMIT);
    CHECK(over_limit == 0);
    CHECK(failures_release == 0);
    CHECK(failures_table_full == 0);
    CHECK(failures_double_event == 0);
    CHECK(failures_event_after_cancel == 0);
    CHECK(unended == 0);
    CHECK(unregistered == 0);
    CHECK(multi == 0);
    CHECK(waiting == 0);
    CHECK(m.limiter.inflight == 0);
    CHECK(m.granted == granted_seen);
    CHECK(m.expired + m.sloughed + m.evicted + m.shed == expired_seen);
    CHECK(m.cancelled == cancelled_ok);
    CHECK(m.queued == (uint64_t)n_records);
    /* Every permit this program released was a success; the gate's own returns of slots
     * it took for waiters that left meanwhile are `ignored`, so successes count exactly the
     * admissions handed out. */
    CHECK(m.limiter.successes == admitted_direct + granted_seen);
    CHECK(m.limiter.drops == 0);
    CHECK(m.queue_full + m.deadline_unmeetable + m.shed == refused);
    CHECK(admitted_direct + refused + n_records == THREADS * per_thread);
    CHECK(n_records > 0); /* the test queued something */

    sg_gate_free(gate);
    free(records);
    return SUMMARY("stress_gate");
}
