'use strict'
const test = require('node:test')
const assert = require('node:assert/strict')
const sg = require('..')

test('renderPrometheus: counters, gauges, level labels, one TYPE per family', () => {
  const gate = new sg.Gate({ algorithm: 'fixed', initialLimit: 2 })
  const p = gate.tryAcquire({ priority: 'critical' })
  p.success()
  const breaker = new sg.CircuitBreaker()
  const budget = new sg.RetryBudget()
  budget.deposit()
  const text = sg.renderPrometheus({ api: gate, 'db"x': breaker, client: budget })
  assert.match(text, /^# TYPE surgeguard_gate_granted_total counter$/m)
  assert.match(text, /^surgeguard_gate_limiter_successes_total\{name="api"\} 1$/m)
  assert.match(text, /^surgeguard_gate_limiter_inflight_by_level\{name="api",level="critical"\} 0$/m)
  assert.match(text, /^surgeguard_gate_state\{name="api",state="healthy"\} 1$/m)
  assert.match(text, /^surgeguard_breaker_state\{name="db\\"x",state="closed"\} 1$/m)
  assert.match(text, /^surgeguard_retry_budget_requests_total\{name="client"\} 1$/m)
  const types = text.split('\n').filter((l) => l.startsWith('# TYPE'))
  assert.equal(new Set(types).size, types.length)
  for (const line of text.trim().split('\n')) {
    assert.match(line, /^(# TYPE [a-z0-9_]+ (counter|gauge)|[a-z0-9_]+(\{.*\})? [-+0-9.eInf]+)$/, line)
  }
  assert.throws(() => sg.renderPrometheus({ x: {} }), TypeError)
})
