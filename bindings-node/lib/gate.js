'use strict'
const N = require('./native')
const { F } = N
const { call, reasonName, RejectedError, OverloadError } = require('./errors')
const v = require('./validate')
const { guard, badThis } = require('./brand')
const { Levels } = require('./priority')
const { newPermit, endPermit, OUTCOMES } = require('./permit')
const { LIMITER_SPEC, checkAlgorithmOptions, releaseFailure } = require('./limiter')
const { OPEN, sharedName, tableFull } = require('./shared')
/** `sharedGateTryAcquire`'s code for a shared gate whose process table is full. */
const TABLE_FULL = -64

const QUEUED_BASE = 16
/** The wire value of `limit_reached` (the refusal that may still queue). */
const LIMIT_REACHED = 1
const TRY_OPTIONS = ['priority', 'nowNs', 'deadlineNs']
const ACQUIRE_OPTIONS = ['priority', 'timeoutMs', 'deadlineNs', 'signal', 'nowNs']
const RUN_OPTIONS = ['priority', 'timeoutMs', 'deadlineNs', 'signal', 'nowNs', 'classify']

const GATE_SPEC = {
  queueCapacity: (w, x) => v.int(w, x, 1, 4096),
  codel: 'bool',
  codelTargetMs: 'ms',
  codelIntervalMs: 'ms',
  codelMode: v.oneOf('folly', 'rfc8289'),
  lifo: (w, x) => (typeof x === 'number' ? v.number(w, x) : v.oneOf('codel', 'never')(w, x)),
  maxWaitMs: 'ms',
  aging: (w, x) => {
    if (x === null || typeof x !== 'object') throw v.typeErr(`${w} must be { from, to, afterMs } (got ${v.show(x)})`)
    return v.options(w, x, { from: (_, y) => y, to: (_, y) => y, afterMs: 'ms' })
  },
  initialServiceMs: 'ms',
  serviceAlpha: 'number',
  fallbackRetryAfterMs: 'ms',
  classify: 'fn'
}

/**
 * The default outcome of work that threw: an overload signal (`dropped`) for our own
 * refusals and timeouts, otherwise `ignore`: an application error says nothing about
 * capacity (as in Netflix concurrency-limits, where only drops make the limit back off).
 */
function defaultClassify (err) {
  if (err instanceof OverloadError) return 'dropped'
  if (err && (err.name === 'TimeoutError' || err.code === 'ETIMEDOUT' || err.code === 'UND_ERR_HEADERS_TIMEOUT')) return 'dropped'
  return 'ignore'
}

/** An AbortSignal, or anything shaped like one (a polyfill's). */
function isSignal (x) {
  return x instanceof AbortSignal || (x !== null && typeof x === 'object' && typeof x.aborted === 'boolean' &&
    typeof x.addEventListener === 'function' && typeof x.removeEventListener === 'function')
}

/**
 * Milliseconds from `now` (bigint ns, or the clock) until `deadlineNs` (a bigint on the
 * `sg.nowNs()` clock, checked), 0 once passed: the core's timeout for that deadline.
 */
function untilMs (deadlineNs, now) {
  if (typeof deadlineNs !== 'bigint') throw v.typeErr(`deadlineNs must be a bigint (got ${v.show(deadlineNs)})`)
  if (deadlineNs < 0n || deadlineNs > v.MAX_NOW_NS) throw v.rangeErr(`deadlineNs must be in [0, 2^62] (got ${v.show(deadlineNs)})`)
  const left = deadlineNs - (now === undefined ? N.nowNs() : now)
  return left > 0n ? Number(left) / 1e6 : 0
}

function abortReason (signal) {
  if (signal.reason !== undefined) return signal.reason
  const e = new Error('The operation was aborted')
  e.name = 'AbortError'
  e.code = 'ABORT_ERR'
  return e
}

/**
 * Limiter + bounded priority admission queue + shed switch. `tryAcquire` admits or
 * refuses at once (sync); `acquire` may wait in the queue (a Promise, cancelled by an
 * AbortSignal, bounded by `timeoutMs`); one timer per gate, driven by the core's
 * `next_wakeup`, expires waiters on time.
 */
class Gate {
  constructor (options, open, name) {
    if (options !== undefined && options !== null && (typeof options !== 'object' || Array.isArray(options))) {
      throw v.typeErr(`Gate options must be an object (got ${v.show(options)})`)
    }
    // Null prototypes: an own `__proto__` key must stay a key (and be refused), not
    // become the prototype.
    const limiterIn = Object.create(null)
    const gateIn = Object.create(null)
    for (const k of Object.keys(options || {})) {
      if (Object.hasOwn(LIMITER_SPEC, k)) limiterIn[k] = options[k]
      else gateIn[k] = options[k]
    }
    const limiter = checkAlgorithmOptions('Gate', v.options('Gate', limiterIn, LIMITER_SPEC))
    const g = v.options('Gate', gateIn, GATE_SPEC)
    this._lv = new Levels(limiter.levels === undefined ? 3 : limiter.levels)
    this._classify = g.classify || defaultClassify
    const native = { limiter }
    for (const k of ['queueCapacity', 'codel', 'codelTargetMs', 'codelIntervalMs', 'codelMode', 'lifo', 'maxWaitMs', 'initialServiceMs', 'serviceAlpha', 'fallbackRetryAfterMs']) {
      if (g[k] !== undefined) native[k] = g[k]
    }
    if (g.aging !== undefined) {
      native.agingFrom = this._lv.of(g.aging.from)
      native.agingTo = this._lv.of(g.aging.to)
      native.agingAfterMs = g.aging.afterMs
    }
    // The one difference on the admission path: which native gate, and its raw fast path
    // (`F.gate*` or `F.sharedGate*`, both taking this handle): `_try(h, level[,
    // timeoutMs[, nowNs]])`, `_release(h, id, outcome[, nowNs])`, and `_end`, the permits'
    // release. Only gates have `_try`: the hot methods check `this` by it.
    if (open === OPEN) {
      this._n = call(() => N.NativeSharedGate.open(name, native))
      this._try = F.sharedGateTryAcquire
      this._release = F.sharedGateRelease
      this._end = releaseShared
    } else {
      this._n = call(() => new N.NativeGate(native))
      this._try = F.gateTryAcquire
      this._release = F.gateRelease
      this._end = releaseGate
    }
    this._h = this._n.handle()
    /** ticket → waiter { resolve, reject, level, signal, onAbort } */
    this._waiters = new Map()
    this._timer = null
    this._timerAt = Infinity
    this._rej = 0
    this._rejMs = 0
  }

  /**
   * A permit now, or `null` (sync, never queues): refused when shedding, when anyone of
   * the same or a more important level waits, or when the limiter is full; with
   * `deadlineNs`, also when that deadline cannot be met (`deadline_unmeetable`).
   * `lastRejection` then says why.
   */
  tryAcquire (opts) {
    if (this?._try === undefined) throw badThis('Gate', 'tryAcquire')
    let lvl = this._lv.default
    let now
    let t = -1
    if (opts !== undefined) {
      v.callOptions('tryAcquire', opts, TRY_OPTIONS)
      if (opts.priority !== undefined) lvl = this._lv.of(opts.priority)
      now = v.nowNs(opts.nowNs)
      if (opts.deadlineNs !== undefined) t = untilMs(opts.deadlineNs, now)
    }
    const tryAcquire = this._try
    const r = now === undefined ? (t === -1 ? tryAcquire(this._h, lvl) : tryAcquire(this._h, lvl, t)) : tryAcquire(this._h, lvl, t, now)
    if (r >= 0) return newPermit(this, this._end, r, lvl)
    if (r === TABLE_FULL) throw tableFull()
    this._rej = -r
    this._rejMs = F.lastRetryAfterMs()
    return null
  }

  /** Why the last `tryAcquire` returned null: `{ reason, retryAfterMs }`, or null. */
  get lastRejection () {
    return this._rej === 0 ? null : { reason: reasonName(this._rej), retryAfterMs: this._rejMs }
  }

  /**
   * A permit, waiting in the queue if needed. Rejects with `RejectedError` (`shed`,
   * `queue_full`, `deadline_unmeetable`, `expired`, `evicted`, `codel_slough`, ...) or
   * with the signal's reason when `signal` aborts (the ticket is cancelled).
   * `timeoutMs` is the longest the caller will wait (a core deadline); 0 means no wait.
   * `deadlineNs` is an absolute deadline (a bigint on the `sg.nowNs()` clock, e.g.
   * `sg.deadline.current()`); with both, the earlier one holds.
   */
  acquire (opts) {
    if (this?._try === undefined) return Promise.reject(badThis('Gate', 'acquire'))
    let lvl = this._lv.default
    let timeout = -1
    let noWait = false
    let signal
    let now
    if (opts !== undefined) {
      try {
        v.callOptions('acquire', opts, ACQUIRE_OPTIONS)
        if (opts.priority !== undefined) lvl = this._lv.of(opts.priority)
        if (opts.timeoutMs !== undefined) {
          // A zero timeout means no wait at all (and no deadline from it).
          if (v.ms('timeoutMs', opts.timeoutMs) === 0) noWait = true
          else timeout = opts.timeoutMs
        }
        signal = opts.signal
        if (signal !== undefined && !isSignal(signal)) throw v.typeErr(`signal must be an AbortSignal (got ${v.show(signal)})`)
        now = v.nowNs(opts.nowNs)
        if (opts.deadlineNs !== undefined) {
          const t = untilMs(opts.deadlineNs, now)
          timeout = timeout === -1 ? t : Math.min(timeout, t)
        }
      } catch (err) {
        return Promise.reject(err)
      }
      if (signal !== undefined && signal.aborted) return Promise.reject(abortReason(signal))
    }
    let r
    try {
      // Admitted at once through the cheaper non-queueing path: the core's try_arrive,
      // arrive's own decisions (deadline included) up to the queue.
      r = now === undefined ? this._try(this._h, lvl, timeout) : this._try(this._h, lvl, timeout, now)
      if (r >= 0) return Promise.resolve(newPermit(this, this._end, r, lvl))
      if (r === TABLE_FULL) throw tableFull()
      if (r === -LIMIT_REACHED && !noWait) r = this._arrive(lvl, timeout, now)
    } catch (err) {
      return Promise.reject(err)
    }
    if (r >= 0) return Promise.resolve(newPermit(this, this._end, r, lvl))
    if (r > -QUEUED_BASE) return Promise.reject(new RejectedError(reasonName(-r), F.lastRetryAfterMs()))
    return this._wait(-r - QUEUED_BASE, lvl, signal, now)
  }

  /** `gateArrive`: a permit id, `-reason`, or `-(QUEUED_BASE + ticket)`. */
  _arrive (lvl, timeout, now) {
    return now === undefined ? F.gateArrive(this._h, lvl, timeout) : F.gateArrive(this._h, lvl, timeout, now)
  }

  _wait (ticket, lvl, signal, now) {
    return new Promise((resolve, reject) => {
      const w = { resolve, reject, level: lvl, signal, onAbort: null }
      if (signal !== undefined) {
        w.onAbort = () => this._abort(ticket, w)
        signal.addEventListener('abort', w.onAbort, { once: true })
      }
      this._waiters.set(ticket, w)
      this._queued(now)
    })
  }

  /** After a waiter queued: the core asks for one poll at once (a slot may have freed). */
  _queued (now) {
    this._pump(now)
  }

  _abort (ticket, w) {
    if (this._waiters.get(ticket) !== w) return
    this._waiters.delete(ticket)
    // Withdrawn (a shared gate releases a grant that raced with it, as ignored, natively).
    this._n.cancel(ticket)
    w.reject(abortReason(w.signal))
    this._schedule()
  }

  _settled (w) {
    if (w.signal !== undefined) w.signal.removeEventListener('abort', w.onAbort)
  }

  /** Polls the core and settles the waiters it reports, then re-arms the timer. */
  _pump (nowNs) {
    this._settle(nowNs === undefined ? this._n.poll() : this._n.poll(nowNs))
  }

  /**
   * Settles the waiters of `ev`'s `[kind, ticket, a, b]` quadruples (see the native
   * `poll`), then `_schedule`s.
   */
  _settle (ev) {
    for (let i = 0; i < ev.length; i += 4) {
      const ticket = ev[i + 1]
      const w = this._waiters.get(ticket)
      if (ev[i] === 0) {
        if (w === undefined) {
          this._release(this._h, ev[i + 2], 2) // nobody waits for it any more
          continue
        }
        this._waiters.delete(ticket)
        this._settled(w)
        w.resolve(newPermit(this, this._end, ev[i + 2], w.level))
      } else if (w !== undefined) {
        this._waiters.delete(ticket)
        this._settled(w)
        w.reject(new RejectedError(reasonName(ev[i + 2]), ev[i + 3]))
      }
    }
    this._schedule()
  }

  /** One timer per gate, at the core's next wakeup; none while nothing waits. */
  _schedule () {
    let at = Infinity
    if (this._waiters.size > 0) {
      const ms = this._n.nextWakeupMs()
      if (ms >= 0) at = performance.now() + ms
    }
    if (at === this._timerAt) return
    if (this._timer !== null && at >= this._timerAt && at !== Infinity) return
    if (this._timer !== null) clearTimeout(this._timer)
    this._timer = null
    this._timerAt = at
    if (at === Infinity) return
    this._timer = setTimeout(() => {
      this._timer = null
      this._timerAt = Infinity
      this._pump()
    }, Math.max(0, Math.ceil(at - performance.now())))
  }

  /**
   * Runs `fn(permit)` under a permit (waiting like `acquire(opts)`), then ends the permit:
   * `success` when it resolves, and when it throws the outcome `classify(err)` returns
   * (default: `dropped` for overload errors and timeouts, `ignore` otherwise).
   */
  run (fn, opts) {
    if (this?._try === undefined) return Promise.reject(badThis('Gate', 'run'))
    if (typeof fn !== 'function') return Promise.reject(v.typeErr(`run needs a function (got ${v.show(fn)})`))
    let classify = this._classify
    let lvl = this._lv.default
    if (opts !== undefined) {
      try {
        v.callOptions('run', opts, RUN_OPTIONS)
        if (opts.classify !== undefined) classify = v.fn('classify', opts.classify)
        if (opts.priority !== undefined) lvl = this._lv.of(opts.priority)
      } catch (err) {
        return Promise.reject(err)
      }
      if (opts.signal !== undefined || opts.timeoutMs !== undefined || opts.deadlineNs !== undefined || opts.nowNs !== undefined) {
        const o = Object.assign({}, opts)
        delete o.classify
        return this.acquire(o).then((p) => runUnder(p, fn, classify))
      }
    }
    // Fast path: admitted at once.
    let r = this._try(this._h, lvl)
    if (r >= 0) return runUnder(newPermit(this, this._end, r, lvl), fn, classify)
    if (r === TABLE_FULL) return Promise.reject(tableFull())
    if (r === -LIMIT_REACHED) {
      try {
        r = this._arrive(lvl, -1)
      } catch (err) {
        return Promise.reject(err)
      }
    }
    if (r >= 0) return runUnder(newPermit(this, this._end, r, lvl), fn, classify)
    if (r > -QUEUED_BASE) return Promise.reject(new RejectedError(reasonName(-r), F.lastRetryAfterMs()))
    return this._wait(-r - QUEUED_BASE, lvl, undefined, undefined).then((p) => runUnder(p, fn, classify))
  }

  /**
   * The on-call switch: refuse every level ≥ `priority` at once (`'background'` sheds
   * background only, `'normal'` normal and background); `null` turns it off. Nothing
   * else is accepted: a missing argument is a TypeError, not "shed from level 1".
   */
  setShedLevel (priority) {
    if (priority === undefined) throw v.typeErr('setShedLevel needs a priority, or null to stop shedding')
    const level = priority === null ? null : this._lv.of(priority)
    call(() => this._n.setShedLevel(level))
    if (this._waiters.size > 0) this._pump()
  }

  get shedLevel () {
    return this._n.shedLevel()
  }

  /**
   * The brownout dimmer, a number in [0, 1]: serve optional content (recommendations,
   * previews, ...) with probability `1 - d`; 0 serves everything, 1 none. It rises before
   * the gate refuses anything (queue occupancy, CoDel's queueing delay), follows the
   * refusals of the last second, and falls back by at most 1/2 per second. Degradation
   * order: optional features (this), then background, then normal work (the gate's own
   * shedding). Reads the gate; changes none of its decisions.
   */
  brownout (nowNs) {
    const now = v.nowNs(nowNs)
    return call(() => (now === undefined ? this._n.brownout() : this._n.brownout(now)))
  }

  /** `healthy` or `overloaded` — overloaded is not broken (keep it in rotation). */
  get state () {
    return this._n.state()
  }

  get waiting () {
    return this._n.waiting()
  }

  get limit () {
    return this._n.limit()
  }

  get inflight () {
    return this._n.inflight()
  }

  /** Permits handed to JS and not yet ended (a leak check). */
  get livePermits () {
    return this._n.livePermits()
  }

  /** The kill switch: pin the limit, or `null` to let it adapt again. */
  setStaticLimit (limit) {
    if (limit !== null) v.number('limit', limit)
    call(() => this._n.setStaticLimit(limit))
    if (this._waiters.size > 0) this._pump()
  }

  /** The levels of this gate (`levels.of(name)`, `levels.fromHeader(value)`). */
  get levels () {
    return this._lv
  }

  metrics () {
    return this._n.metrics()
  }

  /**
   * The gate named `name` in shared memory (Linux): one limit, one priority queue and one
   * shed switch across every `cluster` worker, PM2 instance or worker thread that opens the
   * name. A release in any process grants the next waiter, whichever process queued it.
   * `options` as the constructor's (`queueCapacity` at most 256, default 256); a different
   * config under the same name throws `SG_SHM_REFUSED`. The file is
   * `/dev/shm/surgeguard.<name>`, or `name` itself if it contains a `/`.
   */
  static shared (name, options) {
    return new SharedGate(options, OPEN, sharedName('Gate.shared', name))
  }

  /** Whether it lives in shared memory. */
  get shared () {
    return false
  }

  /** Shared: whether this object created the segment (false: attached). True in-process. */
  get created () {
    return true
  }

  /** Shared: process-table slots in use. 1 in-process. */
  get attachedProcesses () {
    return 1
  }

  /** Permits held through this object (shared: counted to this process's slot). */
  get heldHere () {
    return this._n.livePermits()
  }

  /** Shared: gives back dead processes' permits now; how many. 0 in-process. */
  reclaim () {
    return 0
  }
}

function runUnder (permit, fn, classify) {
  let out
  try {
    out = fn(permit)
  } catch (err) {
    endWith(permit, classify, err)
    return Promise.reject(err)
  }
  if (out === null || typeof out !== 'object' || typeof out.then !== 'function') {
    if (!permit.released) endPermit(permit, 0)
    return Promise.resolve(out)
  }
  return out.then((value) => {
    if (!permit.released) endPermit(permit, 0)
    return value
  }, (err) => {
    endWith(permit, classify, err)
    throw err
  })
}

function endWith (permit, classify, err) {
  if (permit.released) return
  let o = 2
  try {
    const name = classify(err)
    const c = typeof name === 'string' ? OUTCOMES.get(name) : undefined
    if (c !== undefined) o = c
  } catch {}
  endPermit(permit, o)
}

/** Ends a gate permit, then grants any waiter the freed slot lets in. */
function releaseGate (gate, id, outcome, nowNs) {
  const r = nowNs === undefined ? F.gateRelease(gate._h, id, outcome) : F.gateRelease(gate._h, id, outcome, nowNs)
  if (r < 0) throw releaseFailure(r)
  if (r > 0 && gate._waiters.size > 0) gate._pump(nowNs)
}

/**
 * A `Gate` in shared memory (made by `Gate.shared`). Grants from other processes reach
 * this one through its mailbox in the segment: a native pump thread, running while this
 * object has waiters, wakes on it and hands the outcomes to this thread (through an
 * unref'd threadsafe function; a ref'd 1 s interval keeps the process alive while
 * something waits). The same thread polls the gate at its next wakeup (deadlines, maximum
 * wait) and sweeps dead processes every 100 ms.
 */
class SharedGate extends Gate {
  constructor (options, open, name) {
    super(options, open, name)
    this._pumping = false
    this._keep = null
  }

  /** Queues through the class method (it refuses a full process table). */
  _arrive (lvl, timeout, now) {
    return call(() => this._n.arrive(lvl, timeout, now))
  }

  /** After a waiter queued: the pump runs, and a grant may have come during the arrival. */
  _queued () {
    this._startPump()
    this._collect()
  }

  _startPump () {
    if (this._pumping) return
    this._n.startPump(() => this._collect())
    this._pumping = true
    // Ref'd: a waiter keeps its process alive (the grant may come from another process).
    this._keep = setInterval(() => this._collect(), 1000)
  }

  /** Stops the pump once nothing waits. */
  _idle () {
    if (this._waiters.size > 0 || !this._pumping) return
    this._pumping = false
    this._n.stopPump()
    clearInterval(this._keep)
    this._keep = null
  }

  /** Takes this object's decided tickets and settles their waiters. */
  _collect () {
    this._settle(this._n.collect())
  }

  /** After a shed-level or limit change: dispatch now, then settle. */
  _pump (nowNs) {
    call(() => (nowNs === undefined ? this._n.poll() : this._n.poll(nowNs)))
    this._collect()
  }

  /** No timer (the pump thread runs the gate's): stops the pump once nothing waits. */
  _schedule () {
    this._idle()
  }

  get shared () {
    return true
  }

  /** Whether this object created the segment (false: attached). */
  get created () {
    return this._n.created()
  }

  /** Process-table slots in use (processes and worker threads attached). */
  get attachedProcesses () {
    return this._n.attached()
  }

  /** Permits counted to this object's process slot. */
  get heldHere () {
    return this._n.heldHere()
  }

  /**
   * Gives back the permits of dead processes now (each exactly once, as ignored) and
   * withdraws their queued tickets, then grants the freed slots to the waiters of any
   * process; returns the permits released. Also done on open and every 100 ms by each
   * object that has waiters; call it from `cluster`'s `exit` event for a prompt return.
   */
  reclaim () {
    const n = this._n.reclaim()
    if (this._waiters.size > 0) this._collect()
    return n
  }
}

/** Ends a shared gate permit; the release dispatches the freed slot to any process. */
function releaseShared (gate, id, outcome, nowNs) {
  const r = nowNs === undefined ? F.sharedGateRelease(gate._h, id, outcome) : F.sharedGateRelease(gate._h, id, outcome, nowNs)
  if (r < 0) throw releaseFailure(r)
  if (gate._waiters.size > 0) gate._collect()
}

guard(Gate, ['tryAcquire', 'acquire', 'run'])
guard(SharedGate)

module.exports = { Gate, SharedGate, defaultClassify }
