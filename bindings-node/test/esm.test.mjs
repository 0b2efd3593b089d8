// ESM: every value index.d.ts declares is a named export of `import ... from 'surgeguard'`
// (the package's own name, through its `exports` map), the same object as in CommonJS.
import test from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import * as ns from 'surgeguard'
import sgDefault, { Gate, RejectedError, OverloadError, Permit, ERROR_CODES, renderPrometheus } from 'surgeguard'

const require = createRequire(import.meta.url)
const cjs = require('surgeguard')

test('ESM named imports: every name index.d.ts declares, identical to the CommonJS export', () => {
  const dts = readFileSync(new URL('../index.d.ts', import.meta.url), 'utf8')
  const declared = [...dts.matchAll(/^export (?:declare )?(?:class|function|const|let) ([A-Za-z_]\w*)/gm)].map((m) => m[1])
  assert.ok(declared.length >= 30, `only ${declared.length} names found in index.d.ts`)
  for (const name of declared) {
    assert.ok(name in ns, `${name} is declared but not a named ESM export`)
    assert.equal(ns[name], cjs[name], name)
  }
  for (const name of Object.keys(cjs)) assert.equal(ns[name], cjs[name], `CommonJS export ${name} missing from ESM`)
  assert.equal(sgDefault, cjs)
})

test('ESM: the imported classes work', async () => {
  const gate = new Gate({ algorithm: 'fixed', initialLimit: 1 })
  const p = gate.tryAcquire()
  assert.ok(p instanceof Permit)
  await assert.rejects(gate.acquire({ timeoutMs: 0 }), (e) => e instanceof RejectedError && e instanceof OverloadError)
  p.success()
  assert.ok(ERROR_CODES.includes('SG_INVALID_ARG'))
  assert.match(renderPrometheus({ gate }), /surgeguard_gate_/)
})
