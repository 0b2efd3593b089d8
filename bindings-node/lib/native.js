'use strict'
// The generated napi-rs loader (native/binding.js, built by `npm run build`, which
// `npm ci` runs as `prepare`). Everything native is reached through here.
let binding
try {
  binding = require('../native/binding.js')
} catch (err) {
  const e = new Error(
    'surgeguard: the native addon is not built. Run `npm run build` in the package ' +
      '(it needs a Rust toolchain; `npm ci` builds it through the prepare script).'
  )
  e.cause = err
  throw e
}

module.exports = binding
module.exports.F = binding.fast
