#!/usr/bin/env python3
"""The minimum Rust versions we claim hold for the locked dependencies, with the installed
toolchain only (no other compiler is downloaded).

Claims: `rust-version` of the workspace (the core crate, default features) and the README's
"Minimum Rust version" table (a feature's own minimum, where it is higher). For the core and
for each feature of `agent-errors`, `cargo tree` resolves the dependencies a user would build
(normal and build edges, every target platform) from `Cargo.lock`, and `cargo metadata` gives
each one's declared `rust-version`: one above the claim fails, with the crate that asks for it.

Our own code is held to the workspace's `rust-version` by clippy's `incompatible_msrv` (denied
in `[workspace.lints.clippy]`, so the clippy steps of `.ci/run` check it).

Usage: python3 scripts/check_msrv.py   (from anywhere in the checkout; exits 1 on a problem)
"""

import json
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORE = "agent-errors"
# `| `mcp` | 1.88 | rmcp 3.11 |` in the README's table.
ROW = re.compile(r"^\|\s*`([a-z0-9_-]+)`\s*\|\s*(\d+\.\d+)(?:\.\d+)?\s*\|")


def cargo(*args):
    out = subprocess.run(
        ["cargo", *args, "--offline", "--locked"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    )
    return out.stdout


def version(text):
    """`1.85`, `1.85.0` -> (1, 85, 0); None -> (0, 0, 0)."""
    parts = [int(p) for p in (text or "0").split(".")[:3]]
    return tuple(parts + [0] * (3 - len(parts)))


def shown(v):
    return ".".join(str(p) for p in v[:2]) + (f".{v[2]}" if v[2] else "")


def readme_claims():
    """{feature: version} from the README's "Minimum Rust version" table."""
    text = (ROOT / "README.md").read_text()
    start = text.find("## Minimum Rust version")
    if start < 0:
        sys.exit("README.md has no '## Minimum Rust version' section")
    section = text[start:].split("\n## ", 1)[0]
    claims = {}
    for line in section.splitlines():
        m = ROW.match(line.strip())
        if m:
            claims[m.group(1)] = version(m.group(2))
    return claims


def closure(features):
    """{(name, version)} that `agent-errors` with `features` builds, from the lock file."""
    args = ["tree", "-p", CORE, "-e", "normal,build", "--target", "all",
            "--prefix", "none", "-f", "{p}"]
    if features:
        args += ["--features", ",".join(features)]
    crates = set()
    for line in cargo(*args).splitlines():
        name, _, rest = line.partition(" v")
        if name and rest:
            crates.add((name, rest.split()[0]))
    return crates


def main():
    # `cargo metadata` resolves every package of every target platform, and offline it can only
    # read what is already downloaded: the builds before this step fetch just what the host
    # compiles, so fetch the rest of the lock file first (the lock file itself is not changed).
    subprocess.run(["cargo", "fetch", "--locked"], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    meta = json.loads(cargo("metadata", "--format-version", "1"))
    declared = {(p["name"], p["version"]): p.get("rust_version") for p in meta["packages"]}
    core_pkg = next(p for p in meta["packages"] if p["name"] == CORE)
    core_claim = version(core_pkg.get("rust_version"))
    features = sorted(f for f in core_pkg["features"] if f != "default")
    claims = readme_claims()

    problems = []
    if claims.get("default") != core_claim:
        problems.append(
            f"README's `default` row says {shown(claims.get('default', (0, 0, 0)))}, "
            f"Cargo.toml's rust-version is {shown(core_claim)}")
    for name in sorted(set(claims) - set(features) - {"default"}):
        print(f"note: the README lists `{name}`, which this checkout's {CORE} does not have")

    for feature in [None] + features:
        label = feature or "default"
        claim = claims.get(label, core_claim)
        needs = [(version(declared.get(c)), c) for c in closure([feature] if feature else [])]
        worst, crate = max(needs)
        over = sorted((v, c) for v, c in needs if v > claim)
        for v, (name, ver) in over:
            problems.append(
                f"{label}: {name} {ver} needs Rust {shown(v)}, above the claimed {shown(claim)}")
        print(f"{label:>10}: claimed {shown(claim):<5} locked dependencies need "
              f"{shown(worst):<6} ({crate[0]} {crate[1]})")
        if feature and label in claims and claim > core_claim and worst <= core_claim:
            # Not a failure: a feature's own code may need more than its dependencies do.
            print(f"note: `{label}`'s dependencies build with {shown(core_claim)}; the README's "
                  f"{shown(claim)} must come from its own code")

    if problems:
        print("\n".join(["", "minimum Rust version problems:"] + problems), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
