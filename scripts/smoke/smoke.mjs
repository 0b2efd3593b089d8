// Install smoke test (make installtest), ESM: the default import (the CommonJS exports).
import assert from 'node:assert'
import { createRequire } from 'node:module'
import sg from 'surgeguard'

const require = createRequire(import.meta.url)
assert.strictEqual(sg.version, require('surgeguard/package.json').version)
assert.strictEqual(typeof sg.Gate, 'function')
const gate = new sg.Gate()
const permit = await gate.acquire({ priority: 'normal', timeoutMs: 100 })
permit.success()
const where = process.env.SG_SMOKE_SOURCE_BUILT === '1'
  ? /node_modules\/surgeguard\/native\/[^/]+\.node$/ // built from source by the install script
  : /node_modules\/surgeguard-linux-[^/]+\/[^/]+\.node$/ // the prebuilt package
assert.ok(Object.keys(require.cache).some((k) => where.test(k)))
console.log(`smoke.mjs: surgeguard ${sg.version} (ESM default import) on Node ${process.version}`)
