#!/usr/bin/env python3
"""Fail when a public struct, enum, trait or free function of agent-errors has no `# Examples`.

rustdoc's `missing_doc_code_examples` lint and its JSON output are nightly-only, so this walks the
crate's sources itself, from `src/lib.rs` through every `mod` it declares, with every cfg taken as
enabled (all features). An item counts as public when it is declared `pub` (not `pub(crate)`,
`pub(super)`, `pub(in ..)`) at module level, outside `#[cfg(test)]` and `#[doc(hidden)]` modules
and without `#[doc(hidden)]` itself. That is the set reachable from the crate root because the
crate denies `unreachable_pub`: a `pub` item nobody can reach does not compile, so the check
refuses to run without that lint. Methods are left out: their type's example shows them. In the
proc-macro crate the public items are its `#[proc_macro*]` functions (rustc allows no others).

The item's doc comment must hold a `# Examples` heading followed by a Rust code block that is
not `ignore` (`no_run` is fine for what needs a network); an enum's example must `match` on it.
Prints `file:line: kind name: problem` per miss.

    python3 scripts/check-doc-examples.py [crate_dir ...]   (default: both crates of the workspace)
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

ITEM_KINDS = ("struct", "enum", "trait", "fn", "union")
FN_QUALIFIERS = {"async", "const", "unsafe", "extern", "safe"}


@dataclass
class Token:
    kind: str  # "ident", "punct", "doc", "lit", "lifetime"
    text: str
    line: int


TOKEN_RE = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<outer_doc>///(?!/)[^\n]*)
  | (?P<inner_doc>//![^\n]*)
  | (?P<line_comment>//[^\n]*)
  | (?P<block_start>/\*)
  | (?P<raw_str>b?r(?P<hashes>\#*)")
  | (?P<str>b?"(?:\\.|[^"\\])*")
  | (?P<char>b?'(?:\\x[0-9a-fA-F]{2}|\\u\{[0-9a-fA-F_]+\}|\\.|[^'\\\n])')
  | (?P<lifetime>'[A-Za-z_][A-Za-z0-9_]*)
  | (?P<ident>r\#[A-Za-z_][A-Za-z0-9_]*|[A-Za-z_][A-Za-z0-9_]*)
  | (?P<num>[0-9][A-Za-z0-9_.]*)
  | (?P<punct>::|->|=>|[{}()\[\]<>;,:#!=&*+\-/.@|^%?$~])
    """,
    re.VERBOSE | re.DOTALL,
)


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    pos, line = 0, 1
    while pos < len(text):
        m = TOKEN_RE.match(text, pos)
        if m is None:
            raise SyntaxError(f"line {line}: cannot read {text[pos:pos + 20]!r}")
        kind = m.lastgroup
        if kind == "hashes":
            kind = "raw_str"
        end = m.end()
        if kind == "block_start":
            end = skip_block_comment(text, pos)
            body = text[pos:end]
            if body.startswith("/**") and not body.startswith("/***") and body != "/**/":
                tokens.append(Token("doc", body[3:-2], line))
        elif kind == "raw_str":
            closing = '"' + m.group("hashes")
            close = text.find(closing, end)
            if close < 0:
                raise SyntaxError(f"line {line}: unterminated raw string")
            end = close + len(closing)
            tokens.append(Token("lit", text[pos:end], line))
        elif kind == "outer_doc":
            tokens.append(Token("doc", m.group()[3:], line))
        elif kind in ("str", "char", "num"):
            tokens.append(Token("lit", m.group(), line))
        elif kind in ("ident", "punct", "lifetime"):
            tokens.append(Token(kind, m.group(), line))
        line += text.count("\n", pos, end)
        pos = end
    return tokens


def skip_block_comment(text: str, pos: int) -> int:
    depth, i = 0, pos
    while i < len(text):
        if text.startswith("/*", i):
            depth, i = depth + 1, i + 2
        elif text.startswith("*/", i):
            depth, i = depth - 1, i + 2
            if depth == 0:
                return i
        else:
            i += 1
    raise SyntaxError("unterminated block comment")


def matching(tokens: list[Token], i: int) -> int:
    """Index just past the bracket group that opens at `i`."""
    pairs = {"{": "}", "(": ")", "[": "]"}
    stack = [pairs[tokens[i].text]]
    i += 1
    while stack:
        t = tokens[i]
        if t.kind == "punct":
            if t.text in pairs:
                stack.append(pairs[t.text])
            elif t.text == stack[-1]:
                stack.pop()
        i += 1
    return i


@dataclass
class Item:
    path: Path
    line: int
    kind: str
    name: str
    docs: str
    attrs: list[str]


def attr_text(tokens: list[Token], start: int, end: int) -> str:
    return "".join(t.text for t in tokens[start:end])


def doc_attr_value(attr: str) -> str | None:
    m = re.fullmatch(r'doc=("(?:\\.|[^"\\])*")', attr)
    return m.group(1)[1:-1].encode().decode("unicode_escape") if m else None


def scan(tokens: list[Token], path: Path, src_root: Path, items: list[Item], module_file: Path):
    """Walks one module's tokens: records `pub` items, follows `mod` declarations."""
    i = 0
    docs: list[str] = []
    attrs: list[str] = []
    while i < len(tokens):
        t = tokens[i]
        if t.kind == "doc":
            docs.append(t.text)
            i += 1
            continue
        if t.text == "#" and i + 1 < len(tokens):
            j = i + 1
            if tokens[j].text == "!":  # inner attribute: belongs to the module itself
                i = matching(tokens, j + 1)
                continue
            end = matching(tokens, j)
            attr = attr_text(tokens, j + 1, end - 1)
            value = doc_attr_value(attr)
            if value is not None:
                docs.append(value)
            else:
                attrs.append(attr)
            i = end
            continue
        # An item starts here: read visibility, then the keyword.
        start = i
        visibility = None
        if t.text == "pub":
            visibility = "pub"
            i += 1
            if tokens[i].text == "(":
                visibility = "restricted"
                i = matching(tokens, i)
        while tokens[i].text in FN_QUALIFIERS or tokens[i].kind == "lit":
            i += 1  # `async`, `const`, `unsafe`, `extern "C"`
        keyword = tokens[i].text
        hidden = "doc(hidden)" in attrs
        skipped = hidden or any(re.fullmatch(r"cfg\(test\)", a) for a in attrs)
        if keyword == "mod":
            name = tokens[i + 1].text
            after = tokens[i + 2]
            if not skipped:
                path_attr = next((a for a in attrs if a.startswith("path=")), None)
                if after.text == ";":
                    child = module_path(module_file, name, path_attr)
                    walk(child, src_root, items)
                else:
                    body_end = matching(tokens, i + 2)
                    # An inline module's children sit in `<parent dir>/<name>/`.
                    inner_file = module_file.parent / name / "mod.rs"
                    scan(tokens[i + 3 : body_end - 1], path, src_root, items, inner_file)
            i = skip_item(tokens, i)
        elif keyword in ITEM_KINDS:
            name = tokens[i + 1].text
            if visibility == "pub" and not skipped:
                items.append(Item(path, tokens[start].line, keyword, name, "\n".join(docs), attrs))
            i = skip_item(tokens, i)
        else:
            i = skip_item(tokens, i)
        docs, attrs = [], []


def skip_item(tokens: list[Token], i: int) -> int:
    """Index past the item whose keyword is at `i`: its `;` or its outermost `{ .. }`."""
    while i < len(tokens):
        t = tokens[i]
        if t.kind == "punct" and t.text in "([":
            i = matching(tokens, i)
            continue
        if t.text == ";":
            return i + 1
        if t.text == "{":
            end = matching(tokens, i)
            # `struct S { .. }` and `fn f() { .. }` end at the brace; `static X: T = T { .. };`
            # and `macro_rules! m { .. }` may not.
            if end < len(tokens) and tokens[end].text == ";":
                return end + 1
            return end
        i += 1
    return i


def module_path(parent: Path, name: str, path_attr: str | None) -> Path:
    base = parent.parent if parent.name in ("mod.rs", "lib.rs", "main.rs") else parent.with_suffix("")
    if path_attr:
        return parent.parent / path_attr[len('path="') : -1]
    flat = base / f"{name}.rs"
    return flat if flat.exists() else base / name / "mod.rs"


def walk(path: Path, src_root: Path, items: list[Item]):
    try:
        tokens = tokenize(path.read_text())
    except SyntaxError as error:
        raise SystemExit(f"{path}: {error}") from None
    scan(tokens, path, src_root, items, path)


EXAMPLES_HEADING = re.compile(r"^\s*#\s+Examples?\s*$", re.MULTILINE)
FENCE = re.compile(r"^\s*```(?P<info>[^\n`]*)$", re.MULTILINE)


RUST_FENCE_WORDS = {"", "rust", "no_run", "should_panic", "compile_fail", "ignore"}


def example_problem(docs: str, kind: str = "") -> str | None:
    heading = EXAMPLES_HEADING.search(docs)
    if heading is None:
        return "no `# Examples` section"
    fences = FENCE.findall(docs, heading.end())
    # Fences come in pairs: the opening one carries the info string.
    infos = [{w.strip() for w in info.split(",")} for info in fences[::2]]
    rust = [info for info in infos if info <= RUST_FENCE_WORDS or any(w.startswith("edition") for w in info)]
    if not rust:
        return "`# Examples` has no Rust code block"
    if all("ignore" in info for info in rust):
        return "example is `ignore`d (use `no_run` when it needs a network, and say why)"
    if kind == "enum" and not re.search(r"\bmatch\b", docs[heading.end():]):
        return "an enum's example shows the `match` a user writes on it"
    return None


def public_items(crate: Path) -> list[Item]:
    """The crate's public structs, enums, traits and functions, as described at the top."""
    src = crate / "src"
    lib = src / "lib.rs"
    items: list[Item] = []
    walk(lib, src, items)
    if re.search(r"^proc-macro\s*=\s*true", (crate / "Cargo.toml").read_text(), re.MULTILINE):
        # A proc-macro crate exports its macros and nothing else (rustc refuses other `pub`
        # items at its root), so those are its public items.
        return [i for i in items if any(a.startswith("proc_macro") for a in i.attrs)]
    if "#![deny(unreachable_pub)]" not in lib.read_text():
        raise SystemExit(f"{lib}: needs `#![deny(unreachable_pub)]`: this check takes every `pub` item as reachable")
    return items


def main() -> int:
    root = Path(__file__).resolve().parent.parent
    crates = [Path(a) for a in sys.argv[1:]] or [root / "agent-errors", root / "agent-errors-macros"]
    items = [item for crate in crates for item in public_items(crate)]
    missing = []
    for item in items:
        problem = example_problem(item.docs, item.kind)
        if problem:
            rel = item.path.relative_to(root) if item.path.is_relative_to(root) else item.path
            missing.append(f"{rel}:{item.line}: {item.kind} {item.name}: {problem}")
    for line in missing:
        print(line)
    print(f"{len(items) - len(missing)} of {len(items)} public structs, enums, traits, functions and macros have an example")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
