"""Install smoke test: the installed surgeguard wheel imports and decides (make installtest).

Run by an interpreter whose environment holds only the wheel: no source tree on sys.path,
no Rust toolchain on PATH. Exits non-zero on any failure.
"""

import asyncio
import pathlib
import shutil
import sys

import surgeguard as sg
from surgeguard import _native

# The native module comes from the installed wheel, not from a checkout.
native = pathlib.Path(_native.__file__).resolve()
assert "site-packages" in native.parts, f"_native loaded from {native}"
assert native.name.endswith(".abi3.so"), native.name
assert shutil.which("cargo") is None and shutil.which("rustc") is None, "a Rust toolchain is on PATH"
assert sg.__version__ == _native.__version__, (sg.__version__, _native.__version__)

gate = sg.Gate(limit=1)
with gate.acquire(timeout=0.1):
    try:
        with gate.acquire(timeout=0):
            raise AssertionError("a second permit at limit=1")
    except sg.OverloadError as e:
        assert e.retry_after is None or e.retry_after >= 0, e.retry_after
with gate.acquire(timeout=0.1):
    pass


async def main() -> None:
    async with gate.acquire_async(timeout=0.1):
        pass


asyncio.run(main())
budget = sg.RetryBudget()
print(f"smoke.py: surgeguard {sg.__version__} on Python {sys.version.split()[0]} from {native.parent}")
