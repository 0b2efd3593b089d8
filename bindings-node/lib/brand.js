'use strict'
// A method called with the wrong `this` (`const f = gate.metrics; f()`, or `.call({})`)
// gets a TypeError that says so, instead of V8's "Cannot read properties of undefined".
const { typeErr } = require('./validate')

function badThis (cls, name) {
  return typeErr(`${cls}.${name} called on something that is not a ${cls} (a detached method? bind it, or call it on the object)`)
}

/**
 * Wraps every public method and getter of `C.prototype` except those in `hot` (which check
 * `this` themselves, without the wrapper's call) with a check that `this` is a `C`.
 */
function guard (C, hot = []) {
  const proto = C.prototype
  for (const name of Object.getOwnPropertyNames(proto)) {
    if (name === 'constructor' || name.startsWith('_') || hot.includes(name)) continue
    const d = Object.getOwnPropertyDescriptor(proto, name)
    if (typeof d.value === 'function') {
      const f = d.value
      d.value = {
        [name] (...args) {
          if (!(this instanceof C)) throw badThis(C.name, name)
          return f.apply(this, args)
        }
      }[name]
      Object.defineProperty(proto, name, d)
    } else if (typeof d.get === 'function') {
      const g = d.get
      d.get = function () {
        if (!(this instanceof C)) throw badThis(C.name, name)
        return g.call(this)
      }
      Object.defineProperty(proto, name, d)
    }
  }
}

module.exports = { guard, badThis }
