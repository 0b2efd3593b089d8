'use strict'
// A driver for instruction counts of the Node hot paths (see bench/callgrind-bindings.sh):
// runs one path N times after the same warm-up, so that the difference of two runs' counts
// divided by the difference of their N is the cost of one iteration.
//
//   node node_loop.js floor|fast|facade N
//
// floor: one raw N-API call; fast: fast.gateTryAcquire + fast.gateRelease (no facade);
// facade: gate.tryAcquire().success(); limiter: limiter.tryAcquire().success();
// shared: the same on Limiter.shared (Linux shared memory). SG_ADDON names the addon file to load (default:
// the package's own loader).
const path = require('path')
const Module = require('module')
if (process.env.SG_ADDON) {
  const resolve = Module._resolveFilename
  Module._resolveFilename = function (req, parent, ...rest) {
    if (req.endsWith('native/binding.js')) return process.env.SG_ADDON
    return resolve.call(this, req, parent, ...rest)
  }
}
const pkg = path.join(__dirname, '..', '..', 'bindings-node')
const sg = require(pkg)
const { F } = require(path.join(pkg, 'lib', 'native'))
const gate = new sg.Gate({ algorithm: 'fixed', initialLimit: 1_000_000, levels: 1 })
const h = gate._h
const limiter = new sg.Limiter({ algorithm: 'fixed', initialLimit: 1_000_000, levels: 1 })
const sharedName = `callgrind-${process.pid}`
const shared = process.platform === 'linux' ? sg.Limiter.shared(sharedName, { algorithm: 'fixed', initialLimit: 1_000_000, levels: 1 }) : limiter
if (shared !== limiter) sg.unlinkShared(sharedName) // mapped until exit; no file left behind
const [which, n] = [process.argv[2], Number(process.argv[3])]
for (let i = 0; i < 20000; i++) {
  F.gateRelease(h, F.gateTryAcquire(h, 0), 0)
  gate.tryAcquire().success()
  F.floor(h, 1)
  limiter.tryAcquire().success()
  shared.tryAcquire().success()
}
if (which === 'fast') for (let i = 0; i < n; i++) F.gateRelease(h, F.gateTryAcquire(h, 0), 0)
else if (which === 'facade') for (let i = 0; i < n; i++) gate.tryAcquire().success()
else if (which === 'floor') for (let i = 0; i < n; i++) F.floor(h, 1)
else if (which === 'limiter') for (let i = 0; i < n; i++) limiter.tryAcquire().success()
else if (which === 'shared') for (let i = 0; i < n; i++) shared.tryAcquire().success()
else throw new Error(`unknown path ${which}: floor, fast, facade, limiter or shared`)
