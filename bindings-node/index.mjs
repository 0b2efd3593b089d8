// ESM entry: every name of the CommonJS module as a named export (and the module as the
// default export). test/esm.test.mjs imports each one.
import sg from './index.js'

export const {
  Gate,
  Limiter,
  Permit,
  RetryBudget,
  TokenRetryThrottle,
  AdaptiveThrottle,
  Backoff,
  CircuitBreaker,
  RateLimiter,
  PacedDrain,
  Credits,
  LagMeter,
  Watermarks,
  KeyedLimits,
  KeyPermit,
  hashKey,
  actionable,
  isolation,
  OverloadError,
  RejectedError,
  REASONS,
  ERROR_CODES,
  PRIORITY,
  ALGORITHMS,
  nowNs,
  unlinkShared,
  renderPrometheus,
  express,
  fastify,
  readiness,
  createFetch,
  deadline,
  DeadlineError,
  DeadlineTooShortError,
  DeadlineExceededError,
  withFallback,
  isDegradable,
  StaleIfError,
  optional,
  STALE_WARNING,
  version
} = sg

export default sg
