'use strict'
// Objects in shared memory (Linux): `Limiter.shared`, `RateLimiter.shared`,
// `RetryBudget.shared` open the core's object by name in /dev/shm (or at a path), so every
// `cluster` worker, PM2 instance or worker thread that opens the same name shares one limit.
const N = require('./native')
const { call, OverloadError } = require('./errors')
const v = require('./validate')

/** Only the `shared` statics hold it: the constructors' private "open by name" mode. */
const OPEN = Symbol('surgeguard.openShared')

/**
 * A shared object's name: a string (the native side checks the rest: 1 to 200 characters
 * of `[A-Za-z0-9._-]`, or a path containing `/`).
 */
function sharedName (what, name) {
  if (name === null || name === undefined) {
    throw v.typeErr(`${what} needs a name: Node workers are separate processes (cluster spawns them), so there is no anonymous shared object; use the same name in every worker`)
  }
  if (typeof name !== 'string') throw v.typeErr(`${what}: name must be a string (got ${v.show(name)})`)
  return name
}

/** The error of a shared limiter whose process table is full of live processes. */
function tableFull () {
  return new OverloadError('surgeguard: every process slot of the shared limiter is taken by a live process or thread', 'SG_SHM_UNAVAILABLE')
}

/**
 * Removes the name of a shared object; processes attached keep theirs, the next opener
 * creates a new one. Returns whether the name existed. Names only, not paths (a path could
 * be any file: remove a segment you placed at a path with `fs.unlinkSync`).
 */
function unlinkShared (name) {
  sharedName('unlinkShared', name)
  return call(() => N.unlinkShared(name))
}

module.exports = { OPEN, sharedName, tableFull, unlinkShared }
