'use strict'
// The generated napi-rs loader (native/binding.js). It loads, in order: the file named by
// NAPI_RS_NATIVE_LIBRARY_PATH, ./surgeguard.<platform>.node built in a checkout (`npm run
// build`, which `npm ci` runs as `prepare`), then the prebuilt addon from the optional
// package surgeguard-<platform> that npm installs beside this one.
const PREBUILT = ['linux-x64-gnu', 'linux-arm64-gnu', 'linux-x64-musl', 'linux-arm64-musl']
let binding
try {
  binding = require('../native/binding.js')
} catch (err) {
  const e = new Error(
    `surgeguard: no native addon for this platform (${process.platform}-${process.arch}). ` +
      `Prebuilt addons come in the optional packages surgeguard-<platform> for ${PREBUILT.join(', ')}: ` +
      'reinstall without --omit=optional / --no-optional if this is one of them. Otherwise build ' +
      'it from source, which needs a Rust toolchain (https://rustup.rs): in a checkout of ' +
      'surgeguard, `npm ci` in bindings-node builds it (the prepare script), then install that folder.'
  )
  e.code = 'SG_NO_NATIVE_ADDON'
  e.cause = err
  throw e
}

module.exports = binding
module.exports.F = binding.fast
module.exports.PREBUILT = PREBUILT
