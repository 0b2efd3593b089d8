'use strict'
// Deadline headers: parse and format. TEMPORARY JS stand-in with the core's documented rules
// (grpc-timeout: 1–8 digits and a unit H M S m u n; ms headers: a decimal integer; OWS
// trimmed; above one hour ignored as too_large), until the core's functions are exposed
// natively; then this file calls them and holds no rules of its own.

const HEADERS = Object.freeze(['grpc-timeout', 'x-envoy-expected-rq-timeout-ms', 'surgeguard-timeout-ms'])
const IGNORE_REASONS = Object.freeze(['malformed', 'negative', 'too_large'])
const MAX_NOW_NS = 1n << 62n
const HOUR_NS = 3600n * 1000000000n
const UNITS = { H: HOUR_NS, M: 60000000000n, S: 1000000000n, m: 1000000n, u: 1000n, n: 1n }

function trim (s) {
  return s.replace(/^[ \t]+|[ \t]+$/g, '')
}

/** `value` of header `name` → a budget in ns (bigint), or the reason it is ignored. */
function parse (name, value) {
  const s = trim(value)
  const grpc = name.toLowerCase() === 'grpc-timeout'
  const m = grpc ? /^(-?)([0-9]+)([HMSmun])$/.exec(s) : /^(-?)([0-9]+)$/.exec(s)
  if (m === null) return 'malformed'
  if (grpc && m[2].length > 8) return 'malformed'
  if (m[1] === '-') return 'negative'
  const ns = BigInt(m[2]) * (grpc ? UNITS[m[3]] : 1000000n)
  return ns > HOUR_NS ? 'too_large' : ns
}

/** `arrivalNs + budgetNs`, saturating below 2^62. */
function deadlineAt (arrivalNs, budgetNs) {
  const d = arrivalNs + budgetNs
  return d > MAX_NOW_NS ? MAX_NOW_NS : d
}

/** The outgoing value of header `name` for `deadline − now − margin`, or 'exhausted'. */
function format (name, deadlineNs, nowNs, marginNs) {
  let left = deadlineNs - nowNs - marginNs
  if (left > HOUR_NS) left = HOUR_NS
  if (name.toLowerCase() === 'grpc-timeout') {
    for (const [u, k] of [['n', 1n], ['u', 1000n], ['m', 1000000n], ['S', 1000000000n], ['M', 60000000000n], ['H', HOUR_NS]]) {
      const x = left / k
      if (x <= 99999999n) return x > 0n ? `${x}${u}` : 'exhausted'
    }
  }
  const ms = left / 1000000n
  return ms > 0n ? String(ms) : 'exhausted'
}

module.exports = { HEADERS, IGNORE_REASONS, parse, deadlineAt, format }
