'use strict'
// Prometheus text exposition (format 0.0.4) of any surgeguard object's metrics().
const v = require('./validate')

const KINDS = new Map([
  ['Gate', 'gate'],
  ['Limiter', 'limiter'],
  ['CircuitBreaker', 'breaker'],
  ['RetryBudget', 'retry_budget'],
  ['TokenRetryThrottle', 'token_throttle'],
  ['AdaptiveThrottle', 'adaptive_throttle'],
  ['RateLimiter', 'rate_limiter'],
  ['PacedDrain', 'paced_drain'],
  ['Credits', 'credits'],
  ['LagMeter', 'lag_meter'],
  ['Watermarks', 'watermarks'],
  ['KeyedLimits', 'keyed'],
  ['Deadlines', 'deadline'],
  ['StaleIfError', 'stale_if_error'],
  ['Optional', 'optional']
])

/** Fields that only grow (exposed as `<name>_total` counters); everything else is a gauge. */
const COUNTERS = new Set([
  'admitted', 'rejected', 'rejectedByLevel', 'successes', 'drops', 'ignored', 'windows',
  'foldedSamples', 'queued', 'granted', 'expired', 'sloughed', 'evicted', 'cancelled', 'shed',
  'queueFull', 'deadlineUnmeetable', 'aged', 'lifoSwitches', 'retriesAllowed', 'retriesDenied',
  'opened', 'halfOpened', 'closed', 'rampShed', 'probes', 'staleRecords', 'allowed', 'denied',
  'throttled', 'started', 'calls', 'taken', 'completed', 'refused', 'pauses', 'resumes',
  'produced', 'consumed', 'foreignReleases', 'rejectedKeyLimit', 'rejectedKeyRate', 'intervals',
  'failures', 'stalled'
])
/** Per-kind exceptions: windowed values that share a counter's name. */
const GAUGE_IN = { adaptive_throttle: new Set(['requests']), retry_budget: new Set() }
const COUNTER_IN = {
  retry_budget: new Set(['requests']),
  deadline: new Set(['headerDeadlines', 'defaultDeadlines', 'noDeadline', 'ignoredByReason', 'propagated', 'failedFast', 'exceeded', 'retriesSkipped']),
  stale_if_error: new Set(['fresh', 'stale', 'misses', 'evicted']),
  optional: new Set(['served', 'dimmed'])
}
/** Objects whose keys become a label value: `ignoredByReason: { malformed: 1 }` → `{reason="malformed"}`. */
const BY_LABEL = { ignoredByReason: 'reason' }
/** Arrays indexed by priority level. */
const PER_LEVEL = new Set(['inflightByLevel', 'shareByLevel', 'demandByLevel', 'rejectedByLevel', 'waitingByLevel', 'codel'])

function snake (s) {
  return s.replace(/([a-z0-9])([A-Z])/g, '$1_$2').toLowerCase()
}

function esc (s) {
  return String(s).replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n')
}

function labels (obj) {
  const parts = Object.keys(obj).map((k) => `${k}="${esc(obj[k])}"`)
  return parts.length ? `{${parts.join(',')}}` : ''
}

function levelName (i, count) {
  if (i === 0) return 'critical'
  if (i === 1 && count > 2) return 'normal'
  if (i === count - 1 && count >= 2) return 'background'
  return 'level' + i
}

class Out {
  constructor (prefix) {
    this.prefix = prefix
    this.families = new Map()
  }

  add (name, type, lbl, value) {
    if (typeof value === 'boolean') value = value ? 1 : 0
    if (typeof value !== 'number' || Number.isNaN(value)) return
    const full = type === 'counter' ? `${this.prefix}_${name}_total` : `${this.prefix}_${name}`
    let f = this.families.get(full)
    if (f === undefined) {
      f = { type, lines: [] }
      this.families.set(full, f)
    }
    const val = value === Infinity ? '+Inf' : value === -Infinity ? '-Inf' : String(value)
    f.lines.push(`${full}${labels(lbl)} ${val}`)
  }

  text () {
    let s = ''
    for (const [name, f] of this.families) {
      s += `# TYPE ${name} ${f.type}\n`
      for (const l of f.lines) s += l + '\n'
    }
    return s
  }
}

function isCounter (kind, key) {
  if (GAUGE_IN[kind] && GAUGE_IN[kind].has(key)) return false
  if (COUNTER_IN[kind] && COUNTER_IN[kind].has(key)) return true
  return COUNTERS.has(key)
}

function walk (out, kind, path, m, base) {
  const levels = typeof m.levels === 'number' ? m.levels : undefined
  for (const key of Object.keys(m)) {
    const val = m[key]
    const name = path + snake(key)
    const type = isCounter(kind, key) ? 'counter' : 'gauge'
    if (val === null || val === undefined) continue
    if (typeof val === 'string') {
      out.add(name, 'gauge', Object.assign({}, base, { [snake(key)]: val }), 1)
    } else if (Array.isArray(val)) {
      val.forEach((x, i) => {
        const lbl = Object.assign({}, base)
        if (PER_LEVEL.has(key)) lbl.level = levelName(i, levels === undefined ? val.length : levels)
        else if (key === 'topKeys') {
          lbl.key_hash = x.keyHash
          if (x.key != null) lbl.key = x.key
        } else lbl.index = i
        if (x !== null && typeof x === 'object') {
          for (const k of Object.keys(x)) {
            if (key === 'topKeys' && (k === 'key' || k === 'keyHash')) continue
            out.add(`${name}_${snake(k)}`, isCounter(kind, k) ? 'counter' : 'gauge', lbl, x[k])
          }
        } else {
          out.add(name, type, lbl, x)
        }
      })
    } else if (typeof val === 'object' && Object.hasOwn(BY_LABEL, key)) {
      for (const k of Object.keys(val)) out.add(name, type, Object.assign({}, base, { [BY_LABEL[key]]: k }), val[k])
    } else if (typeof val === 'object') {
      walk(out, kind, name + '_', val, base)
    } else {
      out.add(name, type, base, val)
    }
  }
}

/**
 * Renders the metrics of surgeguard objects as Prometheus text. `sources` is
 * `{ name: object }` or an array of `[name, object]`; each object's kind (gate, limiter,
 * breaker, ...) picks the metric prefix `surgeguard_<kind>_`, and `name` becomes the
 * `name` label. Per-level arrays get a `level` label.
 */
function renderPrometheus (sources, options) {
  const o = v.options('renderPrometheus', options, { prefix: 'string' })
  const prefix = o.prefix === undefined ? 'surgeguard' : o.prefix
  if (sources === null || typeof sources !== 'object') {
    throw v.typeErr(`renderPrometheus needs { name: object } or [[name, object], ...] (got ${v.show(sources)})`)
  }
  const entries = Array.isArray(sources) ? sources : Object.entries(sources)
  for (const e of entries) {
    if (!Array.isArray(e) || e.length !== 2) throw v.typeErr('renderPrometheus: each entry must be [name, object]')
    if (typeof e[0] !== 'string') throw v.typeErr(`renderPrometheus: a name must be a string (got ${v.show(e[0])})`)
  }
  let text = ''
  const byKind = new Map()
  for (const [name, obj] of entries) {
    if (obj === null || typeof obj !== 'object' || typeof obj.metrics !== 'function') {
      throw v.typeErr(`renderPrometheus: ${v.show(name)} is not a surgeguard object`)
    }
    const kind = KINDS.get(obj.constructor && obj.constructor.name) || 'custom'
    let out = byKind.get(kind)
    if (out === undefined) {
      out = new Out(`${prefix}_${kind}`)
      byKind.set(kind, out)
    }
    walk(out, kind, '', obj.metrics(), { name })
  }
  for (const out of byKind.values()) text += out.text()
  return text
}

module.exports = { renderPrometheus }
