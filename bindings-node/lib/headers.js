'use strict'
// Deadline headers, parsed and formatted by the core (surgeguard_core::deadline) so every
// binding reads and writes them byte for byte alike: `grpc-timeout` in gRPC's format
// (1–8 digits and a unit), every other name as whole milliseconds; a value that does not
// parse is ignored with a reason (`malformed`, `negative`, `too_large` above one hour).
// This module converts between the native functions' milliseconds and the facade's
// bigint nanoseconds; it holds no rules of its own.
const N = require('./native')

/** The headers read by default: gRPC's, Envoy's, the project's own. */
const HEADERS = Object.freeze(N.deadlineHeaders())
const IGNORE_REASONS = Object.freeze(['malformed', 'negative', 'too_large'])

/** `value` of header `name` → a budget in ns (bigint), or the reason it is ignored. */
function parse (name, value) {
  const r = N.parseDeadlineHeader(name, value)
  return r.budgetMs === null ? r.ignored : BigInt(Math.round(r.budgetMs * 1e6))
}

/** `arrivalNs + budgetNs`, saturating at 2^62 (the core's deadline_at). */
function deadlineAt (arrivalNs, budgetNs) {
  return N.deadlineAt(Number(budgetNs) / 1e6, arrivalNs)
}

/** The outgoing value of header `name` for `deadline − now − margin`, or 'exhausted'. */
function format (name, deadlineNs, nowNs, marginNs) {
  const v = N.formatDeadlineHeader(name, deadlineNs, Number(marginNs) / 1e6, nowNs)
  return v === null ? 'exhausted' : v
}

module.exports = { HEADERS, IGNORE_REASONS, parse, deadlineAt, format }
