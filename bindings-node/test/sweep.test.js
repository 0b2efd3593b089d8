'use strict'
// A property-based sweep of the whole public surface (fast-check) against the contract in
// the README ("Errors and bad input"):
// - every call returns, or throws TypeError/RangeError (code SG_INVALID_ARG),
//   OverloadError or RejectedError with a code of ERROR_CODES; an async call never
//   throws synchronously and rejects with those types;
// - a call that fails changes nothing observable (metrics and gauges are equal before and
//   after);
// - nothing hangs or leaks: once every permit handed out is ended, nothing is in flight,
//   nothing waits and no permit is live.
// The surface is enumerated, not listed: every export of the module, every public method
// and getter of every exported class and of the permits they hand out, and every option
// name index.d.ts declares for each constructor, so a new name is swept without editing
// this file. Runs per property: SG_SWEEP_RUNS (default 40; `npm run sweep` runs 2000).
// SG_SWEEP_SEED fixes fast-check's seed (a failure prints the seed that replays it).
const test = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const fc = require('fast-check')
const sg = require('..')

const RUNS = Number(process.env.SG_SWEEP_RUNS || 40)
if (process.env.SG_SWEEP_SEED) fc.configureGlobal({ seed: Number(process.env.SG_SWEEP_SEED) })
const DTS = fs.readFileSync(path.join(__dirname, '..', 'index.d.ts'), 'utf8')

// ---------------------------------------------------------------------------------------
// What index.d.ts declares

/** Option names of an interface, with those of the interfaces it extends. */
function interfaceKeys (name) {
  const m = new RegExp(`^export interface ${name}(?:<[^>]*>)?(?: extends (\\w+))? \\{([\\s\\S]*?)^\\}`, 'm').exec(DTS)
  if (!m) return []
  const own = [...m[2].matchAll(/^ {2}(\w+)\??:/gm)].map((x) => x[1])
  return m[1] ? interfaceKeys(m[1]).concat(own) : own
}

/** Option names the constructor of class `cls` takes, per index.d.ts. */
function constructorKeys (cls) {
  const block = new RegExp(`^export declare class ${cls} [^{]*\\{([\\s\\S]*?)^\\}`, 'm').exec(DTS)
  if (!block) return []
  const ctor = /constructor \(options\??: ([^\n]*)\)\n/.exec(block[1])
  if (!ctor) return []
  const t = ctor[1].trim()
  if (t.startsWith('{')) return [...t.matchAll(/(\w+)\??:/g)].map((x) => x[1])
  return interfaceKeys(t)
}

const DECLARED = [...DTS.matchAll(/^export (?:declare )?(?:class|function|const) (\w+)/gm)].map((m) => m[1])

// ---------------------------------------------------------------------------------------
// Hostile values

const PROTO_NAMES = ['constructor', '__proto__', 'toString', 'hasOwnProperty', 'valueOf', 'isPrototypeOf',
  'propertyIsEnumerable', 'toLocaleString', '__defineGetter__', 'then']
const WORDS = ['critical', 'normal', 'background', 'success', 'dropped', 'ignore', 'fixed', 'gradient', 'aimd',
  'folly', 'codel', 'never', 'full', 'ring', 'tenant', '', ' ', '7', '1e3', 'NaN']

const scalar = fc.oneof(
  fc.constantFrom(NaN, Infinity, -Infinity, -1, 0, -0, 1, 2, 3, 0.5, 0.2, 1.5, 10, 100, 1000, 2 ** 31, 2 ** 32,
    2 ** 53, 2 ** 64, 2 ** 70, 1e300, -1e300, Number.MAX_VALUE, Number.MIN_VALUE, Number.EPSILON),
  fc.double(),
  fc.integer({ min: -5, max: 50 }),
  fc.constantFrom(0n, 1n, -1n, 5n, 1n << 62n, (1n << 62n) + 1n, 1n << 63n, (1n << 64n) - 1n, 1n << 64n, 1n << 65n, -(1n << 64n)),
  fc.bigInt(),
  fc.constantFrom(...PROTO_NAMES),
  fc.constantFrom(...WORDS),
  fc.string({ maxLength: 8 }),
  fc.constantFrom(undefined, null, true, false),
  fc.constantFrom(Symbol('sg'), () => 1, [], [1, 2, 3], {}, new Date(0), /x/)
)

/** An options object: known names (from index.d.ts), Object.prototype names and noise. */
function optionsOf (keys) {
  const key = fc.oneof(
    { weight: 6, arbitrary: keys.length ? fc.constantFrom(...keys) : fc.constant('x') },
    { weight: 1, arbitrary: fc.constantFrom(...PROTO_NAMES) },
    { weight: 1, arbitrary: fc.string({ maxLength: 6 }) }
  )
  // Built through JSON-like own keys (`__proto__` stays a key, as from a config file).
  return fc.array(fc.tuple(key, scalar), { maxLength: 4 }).map((pairs) => {
    const o = {}
    for (const [k, v] of pairs) Object.defineProperty(o, k, { value: v, enumerable: true, writable: true, configurable: true })
    return o
  })
}

const CALL_KEYS = ['priority', 'nowNs', 'timeoutMs', 'deadlineNs', 'classify', 'signal']
const arg = fc.oneof({ weight: 4, arbitrary: scalar }, { weight: 1, arbitrary: optionsOf(CALL_KEYS) })
const args = fc.array(arg, { maxLength: 4 })

// ---------------------------------------------------------------------------------------
// The contract

function allowed (e) {
  if (e instanceof TypeError || e instanceof RangeError) return e.code === 'SG_INVALID_ARG'
  return e instanceof sg.OverloadError && sg.ERROR_CODES.includes(e.code)
}

function describe (e) {
  return `${e && e.name} ${e && e.code}: ${e && e.message}`
}

/**
 * Fields that move with the clock alone (rates, ages, time left), left out of snapshots
 * read on the real clock.
 */
const TIME_FIELD = /(Ms|Rate|rate|Age|age|Seconds|Probability|probability)$|^(available|tokens|lag|timePaused|state)$/

/**
 * Classes whose `metrics` takes `nowNs` (per index.d.ts). Their snapshots read at
 * `nowNs = 0n`, a time behind every clock: the core clamps it to the latest time the object
 * has seen (a breaker reads its state at 0), so the read moves no clock and crosses no
 * bucket, and two reads around a refused call differ only if the call changed something,
 * every field compared. On the real clock a read can itself move state: a LagMeter folds a
 * rate snapshot at the first call in each 1 s bucket of CLOCK_MONOTONIC, so a read just
 * after a boundary turned `ratesKnown` true although the refused call before it changed
 * nothing (a failure that never shrank).
 */
const CLOCKED = new Set([...DTS.matchAll(/^export declare class (\w+) [^{]*\{([\s\S]*?)^\}/gm)]
  .filter((m) => /^ {2}metrics \(nowNs\?: bigint\)/m.test(m[2]))
  .map((m) => m[1]))

function snapshot (o) {
  if (o === null || typeof o !== 'object') return ''
  const out = {}
  const clocked = CLOCKED.has(o.constructor.name)
  const strip = (m) => JSON.parse(JSON.stringify(m, (k, v) => (!clocked && TIME_FIELD.test(k) ? undefined : typeof v === 'bigint' ? String(v) : v)))
  try {
    if (typeof o.metrics === 'function') out.metrics = strip(clocked ? o.metrics(0n) : o.metrics())
  } catch (e) {
    out.metricsError = describe(e)
  }
  for (const k of ['inflight', 'limit', 'livePermits', 'waiting', 'shedLevel', 'released', 'keyLimit', 'isPaused']) {
    try {
      if (k in o) out[k] = o[k]
    } catch {}
  }
  return JSON.stringify(out)
}

/** Ends every permit in `held` (and those pending promises grant), then checks for leaks. */
async function drain (objects, held, pending) {
  const end = (p) => {
    if (p !== null && typeof p === 'object' && typeof p.released === 'boolean' && !p.released) {
      if (typeof p.ignore === 'function') p.ignore()
      else p.release()
    }
  }
  held.splice(0).forEach(end)
  // Each permit a pending call is granted is ended at once (it may be what the next waits for).
  const all = pending.splice(0).map((p) => p.then(end))
  const settled = await Promise.race([
    Promise.all(all),
    new Promise((resolve) => setTimeout(resolve, 5000, 'hang'))
  ])
  assert.notEqual(settled, 'hang', 'an async call never settled')
  for (const o of objects) {
    for (const k of ['livePermits', 'inflight', 'waiting']) {
      if (k in o) assert.equal(o[k], 0, `${o.constructor.name}.${k} after every permit was ended`)
    }
  }
}

/**
 * Calls `fn`, checking the contract against `target`'s observable state. Returned values
 * (permits, promises) are collected in `held` / `pending`.
 */
async function check (label, target, fn, held, pending) {
  const before = snapshot(target)
  let out
  try {
    out = fn()
  } catch (e) {
    assert.ok(allowed(e), `${label} threw ${describe(e)}`)
    assert.equal(snapshot(target), before, `${label} threw ${describe(e)} and changed state`)
    return
  }
  if (out instanceof Promise) {
    pending.push(out.then((v) => v, (e) => {
      assert.ok(allowed(e), `${label} rejected with ${describe(e)}`)
      return null
    }))
  } else if (out !== null && typeof out === 'object') {
    held.push(out)
  }
}

// ---------------------------------------------------------------------------------------
// "Errors name options the way JS spells them"

/** The core's spellings: snake_case, nanoseconds, and names the options rename. */
const CORE_NAME = /\b[a-z][a-z0-9]*_[a-z0-9_]+\b|\w+_ns\b|(?<![\w.])(ttl|window|bucket|base|cap|openDuration|slowCallDuration|probeLease|rampDuration|shardRate|codel\.\w+|emission|limitRetryAfter)(?![\w])/

/** Every string the caller passed in `o`: itself, or keys and string values at any depth. */
function passedStrings (o, depth = 0) {
  if (typeof o === 'string') return [o]
  if (o === null || typeof o !== 'object' || depth > 3) return []
  return Object.keys(o).flatMap((k) => [k, ...passedStrings(o[k], depth + 1)])
}

/** A double-quoted string as `JSON.stringify` or Rust's `{:?}` writes it. */
const QUOTED = /"(?:[^"\\]|\\.)*"/gs
const ESCAPES = { n: '\n', t: '\t', r: '\r', b: '\b', f: '\f', 0: '\0', '"': '"', "'": "'", '\\': '\\', '/': '/' }

/** The string a quoted literal stands for (`\u{1f600}` is Rust's, `\ud83d` JSON's). */
function unquote (lit) {
  return lit.slice(1, -1).replace(/\\(?:u\{([0-9a-fA-F]{1,6})\}|u([0-9a-fA-F]{4})|(.))/gs, (raw, cp, cu, c) =>
    cp !== undefined ? String.fromCodePoint(parseInt(cp, 16)) : cu !== undefined ? String.fromCharCode(parseInt(cu, 16)) : ESCAPES[c] ?? raw)
}

/**
 * The README's rule on a constructor's error, checked exactly: each quoted string in
 * `message` is one the caller passed (whole; cut at 40 characters and '…' as the facade
 * shows a long one; or as Rust received it, lone surrogates replaced), and the text around
 * them names options as JS spells them: `Name.option` only with an option index.d.ts
 * declares, and none of the core's spellings. A caller's own `"a__` is quoted, not named.
 */
function assertJsSpelling (label, message, name, keys, o) {
  const passed = new Set(passedStrings(o).flatMap((s) => [s, s.toWellFormed(), ...(s.length > 40 ? [s.slice(0, 40) + '…'] : [])]))
  const rest = message.replace(QUOTED, (lit) => {
    assert.ok(passed.has(unquote(lit)), `${label}: ${message}: quotes ${lit}, which the caller did not pass`)
    return '""'
  })
  assert.ok(!rest.replaceAll('""', '').includes('"'), `${label}: ${message}: an unterminated quote`)
  for (const [, k] of rest.matchAll(new RegExp(`(?<![\\w.])${name}\\.(\\w+)`, 'g'))) {
    assert.ok(keys.includes(k), `${label}: ${message}: names ${name}.${k}, which index.d.ts does not declare`)
  }
  assert.doesNotMatch(rest, CORE_NAME, `${label}: ${message}`)
}

// ---------------------------------------------------------------------------------------
// The surface

const CLASSES = DECLARED.filter((n) => typeof sg[n] === 'function' && /^[A-Z]/.test(n) && sg[n].prototype &&
  !(sg[n].prototype instanceof Error) && n !== 'Error')
const FUNCTIONS = DECLARED.filter((n) => typeof sg[n] === 'function' && !CLASSES.includes(n) && !/Error$/.test(n))

/** Minimal valid options for constructors that need some. */
const REQUIRED = {
  RateLimiter: { perSecond: 100 },
  PacedDrain: { targetPerSec: 100 },
  KeyedLimits: { shardLimit: 4 }
}
/** Classes only the binding constructs (their constructors must refuse every caller). */
const HANDED_OUT = ['Permit', 'KeyPermit']

function publicMembers (C) {
  return Object.getOwnPropertyNames(C.prototype).filter((n) => n !== 'constructor' && !n.startsWith('_'))
}

test('the sweep covers every declared export', () => {
  for (const n of DECLARED) assert.ok(n in sg, `${n} is declared in index.d.ts but not exported`)
  for (const n of Object.keys(sg)) assert.ok(DECLARED.includes(n), `${n} is exported but not declared in index.d.ts`)
  for (const n of CLASSES) {
    if (!HANDED_OUT.includes(n)) assert.ok(constructorKeys(n).length > 0 || n === 'Levels', `no options found for ${n}`)
  }
  for (const n of ['REASONS', 'PRIORITY', 'ALGORITHMS', 'ERROR_CODES']) assert.ok(Object.isFrozen(sg[n]), `${n} is frozen`)
  for (const n of CLOCKED) assert.ok(CLASSES.includes(n), `${n}: metrics(nowNs) found in index.d.ts`)
  assert.ok(CLOCKED.has('LagMeter'), 'LagMeter.metrics takes nowNs')
})

test('sweep: a snapshot moves no clock (two reads with nothing between are equal)', () => {
  const spin = () => { for (const t = sg.nowNs(); sg.nowNs() - t < 20_000n;); }
  for (const prime of [false, true]) {
    // 1 µs buckets: a bucket boundary passes between any two reads on the real clock.
    const m = new sg.LagMeter({ bucketMs: 0.001 })
    if (prime) m.recordProduced(5)
    const a = snapshot(m)
    spin()
    assert.equal(snapshot(m), a, `LagMeter, ${prime ? 'after a record' : 'fresh'}`)
  }
  const w = new sg.Watermarks() // capacity 400
  w.observe(400)
  const a = snapshot(w)
  spin()
  assert.equal(snapshot(w), a, 'Watermarks, paused (timePausedMs grows on the real clock)')
})

for (const name of CLASSES) {
  const C = sg[name]
  if (HANDED_OUT.includes(name)) {
    test(`sweep: new ${name}(...) is always refused`, () => {
      fc.assert(fc.property(args, (a) => {
        assert.throws(() => new C(...a), (e) => e instanceof TypeError && e.code === 'SG_INVALID_ARG')
      }), { numRuns: RUNS })
    })
    continue
  }
  const keys = constructorKeys(name)
  test(`sweep: new ${name}(options) with hostile options (${keys.length} declared names)`, () => {
    fc.assert(fc.property(fc.oneof(optionsOf(keys), scalar), (o) => {
      if (REQUIRED[name] && o !== null && typeof o === 'object') Object.assign(o, REQUIRED[name])
      try {
        const x = new C(o)
        assert.ok(x instanceof C)
      } catch (e) {
        assert.ok(allowed(e), `new ${name}(${describeOpts(o)}) threw ${describe(e)}`)
        assertJsSpelling(`new ${name}(${describeOpts(o)})`, e.message, name, keys, o)
      }
    }), {
      numRuns: RUNS * 4,
      // A caller's string with a quote and a core-like spelling, as the whole argument, a
      // value and a key, every run.
      examples: [['"a__'], [{ [keys[0]]: '"a__' }], [{ '"min_limit\\': 1 }], [{ [keys[0]]: '\ud800_ns"'.repeat(9) }]]
    })
  })

  const members = publicMembers(C)
  test(`sweep: every method and getter of ${name} (${members.length}) with hostile arguments`, async () => {
    await fc.assert(fc.asyncProperty(
      fc.array(fc.tuple(fc.constantFrom(...members), args), { minLength: 1, maxLength: 8 }),
      async (calls) => {
        const obj = new C(REQUIRED[name] ? { ...REQUIRED[name] } : undefined)
        const held = []
        const pending = []
        for (const [m, a] of calls) {
          const d = Object.getOwnPropertyDescriptor(C.prototype, m)
          if (typeof d.value === 'function') {
            await check(`${name}.${m}(${a.map(describeOpts).join(', ')})`, obj, () => obj[m](...a), held, pending)
          } else {
            await check(`${name}.${m}`, obj, () => obj[m], held, pending)
          }
          // A permit handed out gets hostile calls too, including a second end.
          const last = held[held.length - 1]
          if (last instanceof sg.Permit || last instanceof sg.KeyPermit) await permitCalls(obj, last, a, held, pending)
        }
        await drain([obj], held, pending)
      }
    ), { numRuns: RUNS })
  })

  test(`sweep: ${name}'s methods called on something else (wrong this)`, async () => {
    const others = [undefined, null, 5, 'x', {}, new sg.Gate(), new sg.Limiter(), Object.create(C.prototype)]
    for (const m of members) {
      const d = Object.getOwnPropertyDescriptor(C.prototype, m)
      const f = typeof d.value === 'function' ? d.value : d.get
      for (const t of others) {
        if (t instanceof C) continue
        let out
        try {
          out = f.call(t)
        } catch (e) {
          assert.ok(allowed(e), `${name}.${m} on ${describeOpts(t)} threw ${describe(e)}`)
          continue
        }
        if (out instanceof Promise) {
          await out.then(() => assert.fail(`${name}.${m} on ${describeOpts(t)} resolved`), (e) => {
            assert.ok(allowed(e), `${name}.${m} on ${describeOpts(t)} rejected with ${describe(e)}`)
          })
        } else if (!(t instanceof Object && Object.getPrototypeOf(t) === C.prototype)) {
          assert.fail(`${name}.${m} on ${describeOpts(t)} returned ${describeOpts(out)}`)
        }
      }
    }
  })
}

/** Hostile calls on a permit of `owner`: bad arguments, then a double end. */
async function permitCalls (owner, p, a, held, pending) {
  const members = publicMembers(Object.getPrototypeOf(p).constructor)
  for (const m of members) {
    if (typeof p[m] !== 'function') continue
    if (a.length === 0) continue
    // Bad arguments first: a refused end leaves the permit held.
    const was = p.released
    await check(`permit.${m}(${a.map(describeOpts).join(', ')})`, owner, () => p[m](...a), held, pending)
    if (!was && p.released) {
      // It ended: a second end is SG_ALREADY_RELEASED and changes nothing.
      await check(`permit.${m} twice`, owner, () => p[m](), held, pending)
      assert.throws(() => p[m](), (e) => e instanceof sg.OverloadError && e.code === 'SG_ALREADY_RELEASED')
      return
    }
  }
}

function describeOpts (o) {
  try {
    if (typeof o === 'symbol') return o.toString()
    if (typeof o === 'function') return 'fn'
    if (typeof o === 'bigint') return `${o}n`
    if (o === undefined) return 'undefined'
    return JSON.stringify(o, (k, v) => (typeof v === 'bigint' ? `${v}n` : typeof v === 'symbol' ? v.toString() : v))
  } catch {
    return String(typeof o)
  }
}

for (const name of FUNCTIONS) {
  if (name === 'fastify') continue // a plugin: swept through a real Fastify instance below
  test(`sweep: ${name}(...) with hostile arguments`, async () => {
    const gate = new sg.Gate()
    const first = {
      readiness: fc.oneof(fc.constant(gate), scalar),
      renderPrometheus: fc.oneof(fc.constant({ gate }), fc.constant([['gate', gate]]), optionsOf(['gate', 'x']), scalar)
    }[name]
    const opts = optionsOf(name === 'express' ? interfaceKeys('HttpOptions') : name === 'createFetch' ? interfaceKeys('FetchOptions') : CALL_KEYS)
    await fc.assert(fc.asyncProperty(first || fc.oneof(opts, scalar), fc.oneof(opts, scalar), args, async (a0, a1, rest) => {
      if (name === 'express' && a0 !== null && typeof a0 === 'object' && rest.length % 2 === 0) a0.gate = gate
      const held = []
      const pending = []
      await check(`${name}(${describeOpts(a0)}, ${describeOpts(a1)})`, gate, () => sg[name](a0, a1, ...rest), held, pending)
      held.length = 0 // middleware, fetch functions: not permits
      await drain([gate], held, pending)
    }), { numRuns: RUNS })
  })
}

test('sweep: the Fastify plugin with hostile options refuses them through register()', async () => {
  const Fastify = require('fastify')
  const gate = new sg.Gate()
  await fc.assert(fc.asyncProperty(optionsOf(interfaceKeys('HttpOptions')), fc.boolean(), async (o, withGate) => {
    if (withGate) o.gate = gate
    const app = Fastify({ logger: false })
    try {
      await app.register(sg.fastify, o)
      await app.ready()
    } catch (e) {
      if (e.code && /^FST_/.test(e.code)) return // Fastify's own plugin errors (e.g. a route twice)
      assert.ok(allowed(e), `fastify.register(surgeguard.fastify, ${describeOpts(o)}) failed with ${describe(e)}`)
    } finally {
      await app.close()
    }
  }), { numRuns: Math.max(5, RUNS / 4) })
})

test('sweep: sg.deadline\'s methods with hostile arguments', async () => {
  const members = Object.getOwnPropertyNames(Object.getPrototypeOf(sg.deadline)).filter((n) => n !== 'constructor')
  assert.ok(members.length >= 7, members.join())
  await fc.assert(fc.asyncProperty(fc.constantFrom(...members), args, async (m, a) => {
    const before = JSON.stringify(sg.deadline.metrics())
    let out
    try {
      out = sg.deadline[m](...a)
    } catch (e) {
      assert.ok(allowed(e), `deadline.${m}(${a.map(describeOpts).join(', ')}) threw ${describe(e)}`)
      assert.equal(JSON.stringify(sg.deadline.metrics()), before)
      return
    }
    if (out instanceof Promise) await out.catch((e) => assert.ok(allowed(e), describe(e)))
    // Outside a scope, nothing is left behind.
    assert.equal(sg.deadline.current(), undefined)
  }), { numRuns: RUNS * 2 })
})

test('sweep: gate.levels (of, fromHeader, name) with hostile input', () => {
  const levels = new sg.Gate().levels
  fc.assert(fc.property(scalar, (x) => {
    for (const m of ['of', 'name']) {
      try {
        levels[m](x)
      } catch (e) {
        assert.ok(allowed(e), `levels.${m}(${describeOpts(x)}) threw ${describe(e)}`)
      }
    }
    const l = levels.fromHeader(x)
    assert.ok(Number.isInteger(l) && l >= 0 && l < levels.count, 'a header never fails a request')
  }), { numRuns: RUNS * 4 })
  const proto = Object.getPrototypeOf(levels)
  for (const m of publicMembers(proto.constructor)) {
    for (const t of [undefined, null, 5, {}, new sg.Gate()]) {
      assert.throws(() => proto[m].call(t, 'normal'), (e) => allowed(e), `levels.${m} on ${describeOpts(t)}`)
    }
  }
})

test('sweep: HTTP headers from a hostile client never make a 500 (Express and Fastify)', async () => {
  const http = require('node:http')
  const gate = new sg.Gate({ algorithm: 'fixed', initialLimit: 4 })
  const keyed = new sg.KeyedLimits({ shardLimit: 2 })
  const express = require('express')
  const app = express()
  app.use(sg.express({ gate, keyed, key: 'x-tenant-id' }))
  app.get('/', (req, res) => res.end('ok'))
  const fastify = require('fastify')({ logger: false })
  await fastify.register(sg.fastify, { gate, keyed, key: 'x-tenant-id' })
  fastify.get('/', async () => 'ok')
  const e = await new Promise((resolve) => { const s = app.listen(0, '127.0.0.1', () => resolve(s)) })
  await fastify.listen({ port: 0, host: '127.0.0.1' })
  const ports = [e.address().port, fastify.server.address().port]
  const agent = new http.Agent({ keepAlive: true })
  const header = fc.oneof(fc.constantFrom(...PROTO_NAMES, ...WORDS, '-1', '8', '99', '1.5', 'CRITICAL', ' normal '),
    fc.string({ maxLength: 12 }).filter((x) => /^[\x20-\x7e]*$/.test(x)))
  const get = (port, headers) => new Promise((resolve, reject) => {
    http.get({ host: '127.0.0.1', port, path: '/', headers, agent }, (res) => {
      res.resume()
      res.on('end', () => resolve(res.statusCode))
    }).on('error', reject)
  })
  try {
    const deadlineHeader = fc.option(fc.tuple(fc.constantFrom('grpc-timeout', 'x-envoy-expected-rq-timeout-ms', 'surgeguard-timeout-ms'), header))
    await fc.assert(fc.asyncProperty(header, fc.option(header), deadlineHeader, fc.constantFrom(...ports), async (priority, tenant, deadline, port) => {
      const headers = { 'x-request-priority': priority }
      if (tenant !== null) headers['x-tenant-id'] = tenant
      if (deadline !== null) headers[deadline[0]] = deadline[1]
      const status = await get(port, headers)
      assert.ok([200, 429, 503].includes(status), `status ${status} for ${JSON.stringify(headers)}`)
    }), { numRuns: RUNS })
  } finally {
    agent.destroy()
    e.closeAllConnections()
    e.close()
    await fastify.close()
  }
  assert.equal(gate.livePermits, 0)
  assert.equal(keyed.livePermits, 0)
})
