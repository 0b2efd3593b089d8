'use strict'
// The published package's `install` script (scripts/npm_pack.sh adds it; a checkout does not
// run it). It compiles nothing when a prebuilt addon loads: npm installs the matching
// optional package surgeguard-<platform> beside this one. When none matches (another
// platform, or `--omit=optional`), it builds the addon from the Rust sources shipped in
// ./rust with cargo, into ./native where the loader looks first. With no cargo on PATH it
// fails with a message that says what to do. SURGEGUARD_SKIP_BUILD=1 skips the build (then
// require('surgeguard') throws SG_NO_NATIVE_ADDON); CARGO_TARGET_DIR is honoured (a warm
// target directory makes the build incremental).
const { spawnSync } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')

const here = __dirname

function say(msg) {
  process.stderr.write(`surgeguard: ${msg}\n`)
}

function prebuiltLoads() {
  try {
    require(path.join(here, 'native', 'binding.js'))
    return true
  } catch {
    return false
  }
}

function isMusl() {
  if (process.platform !== 'linux') return false
  const report = typeof process.report?.getReport === 'function' ? process.report.getReport() : null
  if (report?.header && 'glibcVersionRuntime' in report.header) return !report.header.glibcVersionRuntime
  try {
    return fs.readFileSync('/usr/bin/ldd', 'latin1').includes('musl')
  } catch {
    return false
  }
}

// The file name the napi-rs loader (native/binding.js) tries first in its own folder.
function addonName() {
  const { platform, arch } = process
  if (platform === 'linux') {
    if (arch === 'arm') return `surgeguard.linux-arm-${isMusl() ? 'musleabihf' : 'gnueabihf'}.node`
    return `surgeguard.linux-${arch}-${isMusl() ? 'musl' : 'gnu'}.node`
  }
  if (platform === 'darwin') return `surgeguard.darwin-${arch}.node`
  if (platform === 'win32') return `surgeguard.win32-${arch}-msvc.node`
  if (platform === 'freebsd') return `surgeguard.freebsd-${arch}.node`
  return null
}

function libraryName() {
  if (process.platform === 'win32') return 'surgeguard_node.dll'
  if (process.platform === 'darwin') return 'libsurgeguard_node.dylib'
  return 'libsurgeguard_node.so'
}

function main() {
  if (prebuiltLoads()) return 0
  const where = `${process.platform}-${process.arch}${isMusl() ? ' (musl)' : ''}`
  if (process.env.SURGEGUARD_SKIP_BUILD === '1') {
    say(`no prebuilt addon for ${where}; SURGEGUARD_SKIP_BUILD=1, so none is built (require will throw SG_NO_NATIVE_ADDON)`)
    return 0
  }
  const name = addonName()
  if (name === null) {
    say(`no prebuilt addon for ${where}, and the loader knows no file name for this platform: not supported`)
    return 1
  }
  const manifest = path.join(here, 'rust', 'Cargo.toml')
  if (!fs.existsSync(manifest)) {
    say(`no prebuilt addon for ${where}, and this copy of the package carries no Rust sources to build one`)
    return 1
  }
  const probe = spawnSync('cargo', ['--version'], { encoding: 'utf8' })
  if (probe.error || probe.status !== 0) {
    say(
      `no prebuilt addon for ${where}. Prebuilt addons come in the optional packages ` +
        'surgeguard-linux-x64-gnu, -linux-arm64-gnu, -linux-x64-musl and -linux-arm64-musl: if this is one ' +
        'of those platforms, install again without --omit=optional / --no-optional. Otherwise the addon ' +
        'is built from source, which needs a Rust toolchain (1.88 or later, https://rustup.rs) on PATH: ' +
        'install it and run npm install again. SURGEGUARD_SKIP_BUILD=1 installs without an addon.'
    )
    return 1
  }
  say(`no prebuilt addon for ${where}: building it from source with ${probe.stdout.trim()} (a minute or two)`)
  const targetDir = process.env.CARGO_TARGET_DIR || path.join(here, 'rust', 'target')
  const build = spawnSync(
    'cargo',
    ['build', '--release', '--manifest-path', manifest, '-p', 'surgeguard-node', '--target-dir', targetDir],
    { stdio: ['ignore', 'inherit', 'inherit'] }
  )
  if (build.error || build.status !== 0) {
    say(`the source build failed (cargo exit ${build.status}); the output above says why`)
    return 1
  }
  const built = path.join(targetDir, 'release', libraryName())
  const dest = path.join(here, 'native', name)
  fs.copyFileSync(built, dest)
  if (!process.env.CARGO_TARGET_DIR) fs.rmSync(path.join(here, 'rust', 'target'), { recursive: true, force: true })
  if (!prebuiltLoads()) {
    say(`built ${dest}, but it does not load`)
    return 1
  }
  say(`built ${path.relative(process.cwd(), dest) || dest} from source`)
  return 0
}

process.exitCode = main()
