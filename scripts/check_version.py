#!/usr/bin/env python3
"""One version: everything that states surgeguard's version agrees with the workspace's.

The single source is `version` under `[workspace.package]` in the root Cargo.toml. Checked
against it (exit 1 and one line per disagreement otherwise):

- every workspace crate inherits it (`version.workspace = true`);
- bindings-python/pyproject.toml takes it from Cargo (`dynamic = ["version"]`, no literal);
- bindings-node/package.json `version`, every per-platform package under bindings-node/npm/,
  and the main package's `optionalDependencies` on them if any (scripts/npm_pack.sh adds
  them to the packed copy, as `napi prepublish` would);
- include/surgeguard.h: SURGEGUARD_VERSION_MAJOR/MINOR/PATCH/STRING;
- include/surgeguard.pc `Version:`;
- CHANGELOG.md has a `## [X.Y.Z]` (or Unreleased) section naming it;
- optionally the built native modules (`--python EXE`: `surgeguard.__version__` as that
  interpreter imports it; `--node-dir DIR`: `require('surgeguard').version` from DIR).

Usage: scripts/check_version.py [--root DIR] [--python EXE] [--node-dir DIR]
"""

import argparse
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=Path(__file__).resolve().parent.parent, type=Path)
    ap.add_argument("--python", help="a Python with surgeguard installed: check __version__")
    ap.add_argument("--node-dir", help="a folder where require('surgeguard') works: check .version")
    args = ap.parse_args()
    root: Path = args.root
    errors: list[str] = []
    checked: list[str] = []

    def expect(what: str, got, want) -> None:
        checked.append(what)
        if got != want:
            errors.append(f"{what}: {got!r}, expected {want!r}")

    cargo = tomllib.loads((root / "Cargo.toml").read_text())
    version = cargo["workspace"]["package"]["version"]
    if not re.fullmatch(r"\d+\.\d+\.\d+", version):
        errors.append(f"Cargo.toml: workspace version {version!r} is not MAJOR.MINOR.PATCH")
        print("\n".join(errors), file=sys.stderr)
        return 1
    major, minor, patch = (int(x) for x in version.split("."))

    for member in cargo["workspace"]["members"]:
        pkg = tomllib.loads((root / member / "Cargo.toml").read_text())["package"]
        expect(f"{member}/Cargo.toml version", pkg.get("version"), {"workspace": True})

    py = tomllib.loads((root / "bindings-python/pyproject.toml").read_text())["project"]
    expect("bindings-python/pyproject.toml version (literal)", py.get("version"), None)
    expect("bindings-python/pyproject.toml dynamic version", "version" in py.get("dynamic", []), True)

    node = json.loads((root / "bindings-node/package.json").read_text())
    expect("bindings-node/package.json version", node.get("version"), version)
    for name, v in sorted(node.get("optionalDependencies", {}).items()):
        expect(f"bindings-node/package.json optionalDependencies[{name}]", v, version)
    for pj in sorted((root / "bindings-node/npm").glob("*/package.json")):
        sub = json.loads(pj.read_text())
        rel = pj.relative_to(root)
        expect(f"{rel} version", sub.get("version"), version)

    header = (root / "include/surgeguard.h").read_text()

    def macro(name: str):
        m = re.search(rf"^#define {name} (\S+)\s*$", header, re.M)
        return m.group(1) if m else None

    expect("surgeguard.h SURGEGUARD_VERSION_MAJOR", macro("SURGEGUARD_VERSION_MAJOR"), str(major))
    expect("surgeguard.h SURGEGUARD_VERSION_MINOR", macro("SURGEGUARD_VERSION_MINOR"), str(minor))
    expect("surgeguard.h SURGEGUARD_VERSION_PATCH", macro("SURGEGUARD_VERSION_PATCH"), str(patch))
    expect("surgeguard.h SURGEGUARD_VERSION_STRING", macro("SURGEGUARD_VERSION_STRING"), f'"{version}"')

    pc = re.search(r"^Version:\s*(\S+)", (root / "include/surgeguard.pc").read_text(), re.M)
    expect("include/surgeguard.pc Version", pc.group(1) if pc else None, version)

    changelog = (root / "CHANGELOG.md").read_text() if (root / "CHANGELOG.md").exists() else ""
    heading = re.search(rf"^## \[{re.escape(version)}\]", changelog, re.M)
    expect(f"CHANGELOG.md has a '## [{version}]' section", heading is not None, True)

    if args.python:
        out = subprocess.run([args.python, "-c", "import surgeguard, surgeguard._native as n;"
                              "print(surgeguard.__version__, n.__version__)"],
                             capture_output=True, text=True)
        got = out.stdout.split() if out.returncode == 0 else [out.stderr.strip()[-200:]]
        expect(f"{args.python}: surgeguard.__version__, _native.__version__", got, [version, version])
    if args.node_dir:
        out = subprocess.run(["node", "-p", "const s = require('surgeguard'); "
                              "[s.version, require('surgeguard/package.json').version].join(' ')"],
                             cwd=args.node_dir, capture_output=True, text=True)
        got = out.stdout.split() if out.returncode == 0 else [out.stderr.strip()[-200:]]
        expect("node: require('surgeguard').version, package.json version", got, [version, version])

    for e in errors:
        print(f"check_version: {e}", file=sys.stderr)
    print(f"check_version: {version}: {len(checked) - len(errors)} of {len(checked)} agree")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
