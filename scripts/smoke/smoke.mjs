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
assert.ok(Object.keys(require.cache).some((k) => /node_modules\/surgeguard-linux-[^/]+\/[^/]+\.node$/.test(k)))
console.log(`smoke.mjs: surgeguard ${sg.version} (ESM default import) on Node ${process.version}`)
