'use strict'
// Install smoke test (make installtest): the packed surgeguard tarballs, installed into a
// fresh folder with no Rust toolchain on PATH, load the prebuilt addon and decide
// (SG_SMOKE_SOURCE_BUILT=1: the addon the install script built from source, in the main
// package's native/ folder).
const assert = require('node:assert')
const { execFileSync } = require('node:child_process')
const sg = require('surgeguard')

assert.strictEqual(sg.version, require('surgeguard/package.json').version)
const addon = Object.keys(require.cache).find((k) => k.endsWith('.node'))
if (process.env.SG_SMOKE_SOURCE_BUILT === '1') {
  assert.match(addon, /node_modules\/surgeguard\/native\/surgeguard\.linux-[a-z0-9-]+\.node$/)
} else {
  assert.match(addon, /node_modules\/surgeguard-linux-[a-z0-9]+-(gnu|musl)\/surgeguard\.linux-[a-z0-9-]+\.node$/)
}
for (const tool of ['cargo', 'rustc']) {
  assert.throws(() => execFileSync('sh', ['-c', `command -v ${tool}`], { stdio: 'pipe' }), `${tool} is on PATH`)
}

const gate = new sg.Gate()
const p = gate.tryAcquire({ priority: 'critical' })
assert.ok(p, 'a permit from an idle gate')
p.success()
gate.acquire({ priority: 'background', timeoutMs: 100 }).then((permit) => {
  permit.success()
  console.log(`smoke.cjs: surgeguard ${sg.version} on Node ${process.version}, addon ${addon}`)
})
