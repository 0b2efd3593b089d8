/* Example: a small thread-pool server loop guarded by an sg_gate.
 *
 * The main thread accepts requests (simulated here: a burst above what the pool can
 * serve) and runs the gate's event pump; four workers serve admitted requests. Every
 * request is answered exactly once: 200 when served, or 503/429 with Retry-After and a
 * JSON body when refused or dropped from the queue.
 *
 * Build (from a checkout, after `cargo build --release -p surgeguard-ffi`):
 *   cc -std=c11 example_server.c -o server \
 *      $(PKG_CONFIG_PATH=include pkg-config --cflags --libs surgeguard) -lpthread
 *   LD_LIBRARY_PATH=target/release ./server
 */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <surgeguard.h>

#define WORKERS 4
#define REQUESTS 400
#define SERVICE_NS (2 * SG_MS)

typedef struct request {
    int id;
    uint32_t level;
    uint64_t ticket;
    int queued;       /* waiting in the gate (the main thread's own flag) */
    sg_permit permit; /* the gate's admission, released by the worker */
    int status;       /* 0 until answered */
} request;

static request requests[REQUESTS];
static sg_gate *gate;

/* The pool's job queue and the pump's wake-up: one mutex, two condition variables. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t job_ready = PTHREAD_COND_INITIALIZER;
static pthread_cond_t slot_freed = PTHREAD_COND_INITIALIZER;
static request *jobs[REQUESTS];
static int jobs_head, jobs_tail, answered, shutting_down;

static void answer(request *r, int status) {
    pthread_mutex_lock(&mu);
    r->status = status;
    answered++;
    pthread_mutex_unlock(&mu);
}

/* 503 (global overload) or 429 (per-key), Retry-After and the JSON body every binding
 * sends, built by the library. */
static void refuse(request *r, const sg_rejection *why) {
    sg_actionable a;
    char body[SG_ACTIONABLE_BODY_MAX];
    size_t len = 0;
    static int shown;
    if (sg_actionable_from(why, &a) == SG_OK &&
        sg_actionable_write_json(&a, body, sizeof body, &len) == SG_OK && shown++ < 2) {
        printf("request %3d: HTTP %u, Retry-After: %llu, %s\n", r->id, (unsigned)a.status,
               (unsigned long long)a.retry_after_s, body);
    }
    answer(r, 503);
}

static void submit(request *r) {
    pthread_mutex_lock(&mu);
    jobs[jobs_tail++] = r;
    pthread_cond_signal(&job_ready);
    pthread_mutex_unlock(&mu);
}

static void *worker(void *arg) {
    (void)arg;
    for (;;) {
        request *r;
        struct timespec work = {0, (long)SERVICE_NS};
        pthread_mutex_lock(&mu);
        while (jobs_head == jobs_tail && !shutting_down) {
            pthread_cond_wait(&job_ready, &mu);
        }
        if (jobs_head == jobs_tail) {
            pthread_mutex_unlock(&mu);
            return NULL;
        }
        r = jobs[jobs_head++];
        pthread_mutex_unlock(&mu);

        nanosleep(&work, NULL); /* handle the request */
        sg_gate_release(gate, &r->permit, sg_clock_now_ns(), SG_OUTCOME_SUCCESS);
        answer(r, 200);
        pthread_mutex_lock(&mu);
        pthread_cond_signal(&slot_freed); /* the pump polls: a waiter may get the slot */
        pthread_mutex_unlock(&mu);
    }
}

/* The event pump: hand freed slots to waiters, answer the ones dropped from the queue. */
static void pump(void) {
    sg_gate_event ev[16];
    size_t n = 0, i;
    int r;
    do {
        if (sg_gate_poll(gate, sg_clock_now_ns(), ev, 16, &n) != SG_OK) {
            return;
        }
        for (i = 0; i < n; i++) {
            for (r = 0; r < REQUESTS; r++) { /* route the event by ticket */
                if (requests[r].queued && requests[r].ticket == ev[i].ticket) {
                    break;
                }
            }
            if (r == REQUESTS) {
                continue;
            }
            requests[r].queued = 0;
            if (ev[i].kind == SG_EVENT_GRANTED) {
                sg_permit_move(&ev[i].permit, &requests[r].permit);
                submit(&requests[r]);
            } else {
                refuse(&requests[r], &ev[i].rejection);
            }
        }
    } while (n == 16);
}

/* Sleeps until a worker frees a slot or the gate's next wakeup, whichever is first; the
 * caller then pumps. A wakeup that is already due returns at once: the gate has work only
 * a poll does (e.g. a slot held back for critical traffic, under a fractional limit, is
 * free again for a normal waiter) and no release or arrival may come to trigger it. */
static void wait_for_work(uint64_t max_ns) {
    uint64_t now = sg_clock_now_ns(), wake = SG_NEVER;
    struct timespec until;
    if (sg_gate_next_wakeup(gate, now, &wake) == SG_OK && wake <= now) {
        return;
    }
    if (wake == SG_NEVER || wake > now + max_ns) {
        wake = now + max_ns;
    }
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += (long)(wake - now);
    until.tv_sec += until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    pthread_mutex_lock(&mu);
    pthread_cond_timedwait(&slot_freed, &mu, &until);
    pthread_mutex_unlock(&mu);
}

int main(void) {
    sg_gate_config cfg;
    sg_gate_metrics m;
    pthread_t pool[WORKERS];
    int i, served = 0, refused = 0, done = 0;

    sg_gate_config_default(&cfg);
    /* About one slot per worker. Fractional, as adaptive limits are: the fraction of a
     * slot is held back for critical traffic, and handed to a normal waiter only when the
     * pump acts on a due sg_gate_next_wakeup. */
    cfg.limiter.algorithm = SG_ALGORITHM_FIXED;
    cfg.limiter.fixed.initial_limit = WORKERS - 0.5;
    cfg.limiter.fixed.max_limit = WORKERS;
    cfg.limiter.active_ns = 20 * SG_MS; /* critical's reservation lapses 20 ms after it came */
    /* Size the queue by time: drain rate x acceptable wait, not "big" (a queue holds
     * latency, Little's law). */
    cfg.queue_capacity = 32;
    if (sg_gate_new(&cfg, &gate) != SG_OK) {
        return 1;
    }
    for (i = 0; i < WORKERS; i++) {
        pthread_create(&pool[i], NULL, worker, NULL);
    }

    /* Accept loop: a request every 200 us, four times what the pool serves. */
    for (i = 0; i < REQUESTS; i++) {
        request *r = &requests[i];
        uint64_t now = sg_clock_now_ns();
        sg_rejection why;
        sg_status s;
        r->id = i;
        r->level = (uint32_t)(i % 10 == 0 ? SG_LEVEL_CRITICAL : SG_LEVEL_NORMAL);
        s = sg_gate_arrive(gate, now, r->level, now + 50 * SG_MS, &r->permit, &r->ticket, &why);
        if (s == SG_OK) {
            submit(r);
        } else if (s == SG_REJECTED) {
            refuse(r, &why);
        } else if (s == SG_QUEUED) {
            r->queued = 1; /* the pump answers it */
        }
        pump();
        wait_for_work(200 * 1000);
    }
    while (!done) { /* drain: every queued request is granted or expires */
        pump();
        /* Only a worker or the gate's wakeup ends this wait: no polling on a short tick. */
        wait_for_work(10 * SG_SEC);
        pthread_mutex_lock(&mu);
        done = answered == REQUESTS;
        pthread_mutex_unlock(&mu);
    }

    pthread_mutex_lock(&mu);
    shutting_down = 1;
    pthread_cond_broadcast(&job_ready);
    pthread_mutex_unlock(&mu);
    for (i = 0; i < WORKERS; i++) {
        pthread_join(pool[i], NULL);
    }
    for (i = 0; i < REQUESTS; i++) {
        served += requests[i].status == 200;
        refused += requests[i].status == 503;
    }
    sg_gate_metrics_get(gate, &m);
    printf("example_server: %d requests: %d served, %d refused; gate: %llu queued, "
           "%llu granted, %llu expired, %llu sloughed (queue bound %u)\n",
           REQUESTS, served, refused, (unsigned long long)m.queued,
           (unsigned long long)m.granted, (unsigned long long)m.expired,
           (unsigned long long)m.sloughed, (unsigned)m.capacity);
    sg_gate_free(gate);
    /* Every request answered once, and the gate ends empty. */
    return served + refused == REQUESTS && served > 0 && refused > 0 && m.waiting == 0 &&
                   m.limiter.inflight == 0
               ? 0
               : 1;
}
