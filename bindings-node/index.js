'use strict'
// surgeguard for Node: the shared Rust overload-control core under a hand-written facade.
// See index.d.ts for the documented API.
const N = require('./lib/native')
const { OverloadError, RejectedError, REASONS, ERROR_CODES } = require('./lib/errors')
const { PRIORITY } = require('./lib/priority')
const { Permit } = require('./lib/permit')
const { Limiter, ALGORITHMS } = require('./lib/limiter')
const { Gate } = require('./lib/gate')
const r = require('./lib/resilience')
const flow = require('./lib/flow')
const keyed = require('./lib/keyed')
const { renderPrometheus } = require('./lib/prometheus')
const http = require('./lib/http')
const { createFetch } = require('./lib/fetch')
const dl = require('./lib/deadline')
const degrade = require('./lib/degrade')
const { unlinkShared } = require('./lib/shared')

/** The binding's monotonic clock, ns (what every call uses when no `nowNs` is given). */
function nowNs () {
  return N.nowNs()
}

module.exports = {
  Gate,
  Limiter,
  Permit,
  RetryBudget: r.RetryBudget,
  TokenRetryThrottle: r.TokenRetryThrottle,
  AdaptiveThrottle: r.AdaptiveThrottle,
  Backoff: r.Backoff,
  CircuitBreaker: r.CircuitBreaker,
  RateLimiter: r.RateLimiter,
  PacedDrain: r.PacedDrain,
  Credits: flow.Credits,
  LagMeter: flow.LagMeter,
  Watermarks: flow.Watermarks,
  KeyedLimits: keyed.KeyedLimits,
  KeyPermit: keyed.KeyPermit,
  hashKey: keyed.hashKey,
  actionable: keyed.actionable,
  isolation: keyed.isolation,
  OverloadError,
  RejectedError,
  REASONS,
  ERROR_CODES,
  PRIORITY,
  ALGORITHMS,
  nowNs,
  unlinkShared,
  /** The native addon's version (equals package.json's). */
  version: N.version(),
  renderPrometheus,
  express: http.express,
  fastify: http.fastify,
  readiness: http.readiness,
  createFetch,
  deadline: dl.deadline,
  DeadlineError: dl.DeadlineError,
  DeadlineTooShortError: dl.DeadlineTooShortError,
  DeadlineExceededError: dl.DeadlineExceededError,
  withFallback: degrade.withFallback,
  isDegradable: degrade.isDegradable,
  StaleIfError: degrade.StaleIfError,
  optional: degrade.optional,
  STALE_WARNING: degrade.STALE_WARNING
}
