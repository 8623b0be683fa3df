#!/usr/bin/env python3
"""The README's Installation section works as written: a throw-away crate in a temporary
directory gets the section's dependency block (its `path` lines pointed at this checkout) and
runs the README's first example ("What it looks like") as one of its examples.

Offline: the crate starts from this workspace's `Cargo.lock` and builds into this workspace's
target directory, so it resolves to the versions the workspace tested and downloads nothing.
It also holds the other install lines to the one place that names them: the `git` line to the
`repository` of `[workspace.package]`, the crates.io line to the workspace's version.

Usage: python3 scripts/check_install.py   (exits 1 when the README's lines do not work)
"""

import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
MANIFEST = (ROOT / "Cargo.toml").read_text()
# The README's path line assumes a checkout next to the user's project.
README_PATH = "../agent-errors/agent-errors"


def section(title):
    start = README.index(f"\n## {title}\n")
    return README[start:].split("\n## ", 2)[1]


def first_block(text, lang):
    match = re.search(rf"```{lang}\n(.*?)```", text, re.S)
    if not match:
        sys.exit(f"no ```{lang} block where expected in README.md")
    return match.group(1)


def workspace_value(key):
    match = re.search(rf'^{key}\s*=\s*"([^"]+)"', MANIFEST, re.M)
    return match.group(1)


def profiles():
    """The workspace's `[profile.*]` tables, so the crate reuses the workspace's builds."""
    kept, keep = [], False
    for line in MANIFEST.splitlines():
        if line.startswith("["):
            keep = line.startswith("[profile.")
        if keep:
            kept.append(line)
    return "\n".join(kept)


def check_other_lines(install):
    problems = []
    repository = workspace_value("repository")
    for url in re.findall(r'agent-errors = \{ git = "([^"]+)"', install):
        if url != repository:
            problems.append(f"the git line names {url}, Cargo.toml's repository is {repository}")
    minor = ".".join(workspace_value("version").split(".")[:2])
    if f'agent-errors = "{minor}"' not in install:
        problems.append(f'the crates.io line `agent-errors = "{minor}"` is missing')
    return problems


def main():
    install = section("Installation")
    problems = check_other_lines(install)
    dependencies = first_block(install, "toml")
    if README_PATH not in dependencies:
        problems.append(f"the dependency block has no `path = \"{README_PATH}\"` line")
    if problems:
        sys.exit("README Installation: " + "; ".join(problems))
    example = first_block(section("What it looks like"), "rust")
    checkout = (ROOT / "agent-errors").as_posix()

    with tempfile.TemporaryDirectory(prefix="agent-errors-install-") as tmp:
        crate = pathlib.Path(tmp)
        (crate / "src").mkdir()
        (crate / "examples").mkdir()
        (crate / "Cargo.toml").write_text(
            '[package]\nname = "readme-user"\nversion = "0.0.0"\nedition = "2024"\n'
            "publish = false\n\n"
            + dependencies.replace(README_PATH, checkout)
            + "\n[workspace]\n\n"
            + profiles()
            + "\n"
        )
        (crate / "src" / "lib.rs").write_text("")
        (crate / "examples" / "readme.rs").write_text(example)
        shutil.copy(ROOT / "Cargo.lock", crate / "Cargo.lock")
        target = os.environ.get("CARGO_TARGET_DIR", str(ROOT / "target"))
        command = ["cargo", "run", "--offline", "--quiet", "--example", "readme",
                   "--target-dir", target]
        print("$", " ".join(command), f"(in a throw-away crate: {crate})", flush=True)
        result = subprocess.run(command, cwd=crate)
        if result.returncode != 0:
            print((crate / "Cargo.toml").read_text(), file=sys.stderr)
            sys.exit("the README's Installation block does not build its own example")


if __name__ == "__main__":
    main()
