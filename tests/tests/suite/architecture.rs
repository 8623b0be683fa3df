//! The layer order written in ARCHITECTURE.md holds in the code: every `crate::` path in the
//! runtime crate points to a module on its own floor or below, the imports within a floor
//! form no cycle, and no two files import each other, directly or around a longer loop, by any
//! path (`crate::`, `self::` or `super::`), so sibling files inside a module keep an order too.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The floors, ground first: each a set of top-level module names.
type Floors = Vec<BTreeSet<String>>;

/// Which module imports which: top-level module names.
type Imports = BTreeMap<String, BTreeSet<String>>;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Reads the numbered lines of the `## Floors` section: every backquoted name on line `n` is a
/// module of floor `n`.
fn floors_of(markdown: &str) -> Floors {
    let section = markdown
        .split("\n## ")
        .find(|s| s.starts_with("Floors"))
        .expect("ARCHITECTURE.md has a `## Floors` section");
    section
        .lines()
        .filter(|line| {
            line.split_once(". ")
                .is_some_and(|(n, _)| n.parse::<u32>().is_ok())
        })
        .map(|line| {
            line.split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_owned)
                .collect()
        })
        .collect()
}

/// The code of a file as the compiler sees it outside tests: comments removed, and the test
/// module at its end cut off.
fn code_of(source: &str) -> String {
    let mut lines = Vec::new();
    let mut rest = source.lines().peekable();
    while let Some(line) = rest.next() {
        if line.trim() == "#[cfg(test)]"
            && rest
                .peek()
                .is_some_and(|next| next.trim_start().starts_with("mod "))
        {
            break;
        }
        lines.push(line.split("//").next().unwrap_or(""));
    }
    lines.join("\n")
}

/// The first segment of every path that starts with `crate::`, groups included:
/// `crate::{a::X, b}` names `a` and `b`.
fn crate_paths(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        // `$crate::` and `my_crate::` are other crates' paths.
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            found.extend(group_heads(group));
        } else {
            found.push(ident(rest).to_owned());
        }
    }
    found
}

/// The first segment of each item of a `{...}` group, up to its closing brace.
fn group_heads(group: &str) -> Vec<String> {
    let mut heads = Vec::new();
    let mut depth = 0;
    let mut item_start = true;
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => item_start = true,
            c if item_start && !c.is_whitespace() => {
                heads.push(ident(&group[i..]).to_owned());
                item_start = false;
            }
            _ => {}
        }
    }
    heads
}

fn ident(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    &text[..end]
}

/// What each name the crate root re-exports (`pub use module::{A, B}`) stands for: the module
/// it comes from, so that `crate::A` counts as an import of that module.
fn root_exports(lib: &str) -> BTreeMap<String, String> {
    let mut exports = BTreeMap::new();
    for statement in code_of(lib).split(';') {
        let Some(path) = statement.trim().strip_prefix("pub use ") else {
            continue;
        };
        let module = ident(path).to_owned();
        let names = match path.split_once('{') {
            Some((_, group)) => group.trim_end_matches('}').to_owned(),
            None => path.rsplit("::").next().unwrap_or("").to_owned(),
        };
        for name in names.split(',') {
            let name = name.trim();
            if !name.is_empty() {
                exports.insert(name.to_owned(), module.clone());
            }
        }
    }
    exports
}

/// The module each file of `src` belongs to (its first path component) and what it imports.
fn imports_of(src: &Path) -> (BTreeSet<String>, Imports) {
    let lib = fs::read_to_string(src.join("lib.rs")).expect("lib.rs");
    let exports = root_exports(&lib);
    let mut modules = BTreeSet::new();
    let mut imports = Imports::new();
    for file in rust_files(src) {
        let relative = file.strip_prefix(src).expect("under src");
        let first = relative.components().next().expect("a path");
        let module = first
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_owned();
        if module == "lib" {
            continue;
        }
        modules.insert(module.clone());
        let code = code_of(&fs::read_to_string(&file).expect("a source file"));
        for head in crate_paths(&code) {
            let target = exports.get(&head).cloned().unwrap_or(head);
            if target != module {
                imports.entry(module.clone()).or_default().insert(target);
            }
        }
    }
    (modules, imports)
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).expect("a readable directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

/// Everything wrong with `imports` against `floors`, one sentence each.
fn violations(floors: &Floors, modules: &BTreeSet<String>, imports: &Imports) -> Vec<String> {
    let floor_of: BTreeMap<&str, usize> = floors
        .iter()
        .enumerate()
        .flat_map(|(i, floor)| floor.iter().map(move |m| (m.as_str(), i + 1)))
        .collect();
    let mut problems = Vec::new();
    for module in modules {
        if !floor_of.contains_key(module.as_str()) {
            problems.push(format!("module `{module}` has no floor in ARCHITECTURE.md"));
        }
    }
    for named in floor_of.keys() {
        if !modules.contains(*named) {
            problems.push(format!(
                "ARCHITECTURE.md names `{named}`, which is not a module"
            ));
        }
    }
    for (from, targets) in imports {
        let Some(&from_floor) = floor_of.get(from.as_str()) else {
            continue;
        };
        for to in targets {
            // A name that is neither a module nor a root re-export (a macro, say) is not an
            // import of a module.
            let Some(&to_floor) = floor_of.get(to.as_str()) else {
                continue;
            };
            if to_floor > from_floor {
                problems.push(format!(
                    "`{from}` (floor {from_floor}) imports `{to}` (floor {to_floor}), which is above it"
                ));
            }
        }
    }
    problems.extend(cycles_within_floors(&floor_of, imports));
    problems
}

/// A cycle among the imports between modules of one floor, if there is one, as a sentence.
fn cycles_within_floors(floor_of: &BTreeMap<&str, usize>, imports: &Imports) -> Vec<String> {
    let same_floor = |from: &str| -> Vec<&str> {
        imports
            .get(from)
            .into_iter()
            .flatten()
            .map(String::as_str)
            .filter(|&to| to != from && floor_of.get(to) == floor_of.get(from))
            .collect()
    };
    let mut problems = Vec::new();
    for &start in floor_of.keys() {
        // Depth-first from `start`, looking for a way back to it.
        let mut stack = vec![(start, vec![start])];
        let mut seen = BTreeSet::new();
        while let Some((at, path)) = stack.pop() {
            for next in same_floor(at) {
                if next == start {
                    let cycle = [path.clone(), vec![start]].concat().join(" -> ");
                    problems.push(format!(
                        "imports within floor {} form a cycle: {cycle}",
                        floor_of[start]
                    ));
                    return problems;
                }
                if seen.insert(next) {
                    stack.push((next, [path.clone(), vec![next]].concat()));
                }
            }
        }
    }
    problems
}

/// A module of the crate, as the path of its file from `src`: `agent/run/mod.rs` is
/// `["agent", "run"]`, `lib.rs` is `[]`.
type Module = Vec<String>;

/// Which file imports which, by every path that names a module of the crate.
type FileGraph = BTreeMap<Module, BTreeSet<Module>>;

/// Every path of `code` (in module `at`) that starts with `crate::`, `self::` or `super::`, made
/// absolute from the crate root, groups included: in `agent/run`, `super::{counts::Counts, x}`
/// names `agent/counts/Counts` and `agent/x`.
fn module_paths(code: &str, at: &[String]) -> Vec<Module> {
    let mut found = Vec::new();
    for (start, _) in code.match_indices("::") {
        let head_start = code[..start]
            .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
            .map_or(0, |i| i + 1);
        let head = &code[head_start..start];
        if !matches!(head, "crate" | "self" | "super") {
            continue;
        }
        // `$crate::` is another crate's path; `a::super::` and `super::super::` are read
        // from their first segment.
        let before = &code[..head_start];
        if before.ends_with('$') || before.ends_with("::") {
            continue;
        }
        let mut base: Module = match head {
            "crate" => Vec::new(),
            _ => at.to_vec(),
        };
        if head == "super" {
            base.pop();
        }
        path_items(&code[start + 2..], base, &mut found);
    }
    found
}

/// The paths that `rest` (what follows a `::`) names below `base`: one, or one per item of a
/// `{...}` group, nested groups included.
fn path_items(rest: &str, mut base: Module, found: &mut Vec<Module>) {
    let mut rest = rest;
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut item_start = 0;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        path_items(group[item_start..i].trim_start(), base.clone(), found);
                        return;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        path_items(group[item_start..i].trim_start(), base.clone(), found);
                        item_start = i + 1;
                    }
                    _ => {}
                }
            }
            return;
        }
        let name = ident(rest);
        match name {
            "" | "self" => break,
            "super" => {
                base.pop();
            }
            _ => base.push(name.to_owned()),
        }
        match rest[name.len()..].strip_prefix("::") {
            Some(next) => rest = next,
            None => break,
        }
    }
    found.push(base);
}

/// What each file takes from its own child modules, by name: `agent/mod.rs`'s
/// `pub use outcome::RunError` makes `agent` + `RunError` stand for `agent/outcome`.
type ChildUses = BTreeMap<Module, BTreeMap<String, Module>>;

/// The module `path` lands in: the longest start of it that is a file of the crate (or, when
/// that file only passes the name on from a child of its own, that child), or the module a
/// root re-export (`crate::Agent`) comes from.
fn module_of(
    path: &[String],
    files: &BTreeSet<Module>,
    exports: &BTreeMap<String, String>,
    child_uses: &ChildUses,
) -> Option<Module> {
    let found = (1..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|start| files.contains(start));
    let found = found.map(|file| {
        let child = path
            .get(file.len())
            .and_then(|name| child_uses.get(&file)?.get(name));
        child.cloned().unwrap_or(file)
    });
    found.or_else(|| {
        let module = exports.get(path.first()?)?;
        Some(vec![module.clone()]).filter(|m| files.contains(m))
    })
}

/// The names `code` (the file of module `at`) imports or re-exports from its own child modules
/// (`use child::{A, b::B}`, `pub(crate) use self::child::C`), each with the file it comes from:
/// a sibling that names `super::A` depends on that child, not on the parent that passes it on.
fn child_uses_of(code: &str, at: &[String], files: &BTreeSet<Module>) -> BTreeMap<String, Module> {
    let mut names = BTreeMap::new();
    for statement in code.split(';') {
        let Some((before, path)) = statement.rsplit_once("use ") else {
            continue;
        };
        if before
            .chars()
            .next_back()
            .is_some_and(|c| !(c.is_whitespace() || c == ')'))
        {
            continue;
        }
        let path = path.trim();
        let path = path.strip_prefix("self::").unwrap_or(path);
        let head = ident(path);
        let child = [at, &[head.to_owned()]].concat();
        let Some(rest) = path[head.len()..].strip_prefix("::") else {
            continue;
        };
        if head.is_empty() || !files.contains(&child) {
            continue;
        }
        let mut found = Vec::new();
        path_items(rest.trim_start(), child, &mut found);
        for item in found {
            let Some(name) = item.last().cloned() else {
                continue;
            };
            if let Some(file) = module_of(&item, files, &BTreeMap::new(), &ChildUses::new()) {
                names.insert(name, file);
            }
        }
    }
    names
}

/// The file-level import graph of the crate at `src`.
fn file_graph(src: &Path) -> FileGraph {
    let lib = fs::read_to_string(src.join("lib.rs")).expect("lib.rs");
    let exports = root_exports(&lib);
    let mut sources = BTreeMap::new();
    for file in rust_files(src) {
        let relative = file
            .strip_prefix(src)
            .expect("under src")
            .with_extension("");
        let mut module: Module = relative
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if module
            .last()
            .is_some_and(|last| last == "mod" || last == "lib")
        {
            module.pop();
        }
        sources.insert(
            module,
            code_of(&fs::read_to_string(&file).expect("a source file")),
        );
    }
    graph_of(&sources, &exports)
}

/// The import graph of `sources` (each file's code, by module), with the root's re-exports.
fn graph_of(sources: &BTreeMap<Module, String>, exports: &BTreeMap<String, String>) -> FileGraph {
    let files: BTreeSet<Module> = sources.keys().cloned().collect();
    let child_uses: ChildUses = sources
        .iter()
        .map(|(module, code)| (module.clone(), child_uses_of(code, module, &files)))
        .collect();
    let mut graph = FileGraph::new();
    for (module, code) in sources {
        let targets = graph.entry(module.clone()).or_default();
        for path in module_paths(code, module) {
            if let Some(target) = module_of(&path, &files, exports, &child_uses) {
                if &target != module && !target.is_empty() {
                    targets.insert(target);
                }
            }
        }
    }
    graph
}

/// Every loop of imports between files of `graph`, one sentence each: for each file on a loop
/// not yet reported, the loop back to it.
fn file_cycles(graph: &FileGraph) -> Vec<String> {
    let name = |m: &Module| {
        if m.is_empty() {
            "lib".to_owned()
        } else {
            m.join("/")
        }
    };
    let mut reported: BTreeSet<&Module> = BTreeSet::new();
    let mut problems = Vec::new();
    for start in graph.keys() {
        if reported.contains(start) {
            continue;
        }
        // Breadth-first from `start`, keeping the way each file was reached.
        let mut came_from: BTreeMap<&Module, &Module> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start]);
        let mut back = None;
        while let Some(at) = queue.pop_front() {
            for next in graph.get(at).into_iter().flatten() {
                if next == start {
                    back = Some(at);
                    break;
                }
                if !came_from.contains_key(next) {
                    came_from.insert(next, at);
                    queue.push_back(next);
                }
            }
            if back.is_some() {
                break;
            }
        }
        let Some(mut at) = back else { continue };
        let mut cycle = vec![start];
        while at != start {
            cycle.push(at);
            at = came_from[at];
        }
        cycle.reverse();
        cycle.insert(0, start);
        reported.extend(cycle.iter().copied());
        let names: Vec<String> = cycle.iter().map(|m| name(m)).collect();
        problems.push(format!("files import each other: {}", names.join(" -> ")));
    }
    problems
}

#[test]
fn every_import_of_the_runtime_crate_points_down_the_floors_of_architecture_md() {
    let root = workspace();
    let markdown = fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let floors = floors_of(&markdown);
    assert!(floors.len() >= 3, "ARCHITECTURE.md lists its floors");
    let (modules, imports) = imports_of(&root.join("agent-errors/src"));
    assert!(
        imports.get("agent").is_some_and(|i| i.contains("executor")),
        "the scan finds the imports it checks"
    );
    let problems = violations(&floors, &modules, &imports);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn no_two_files_of_the_runtime_crate_import_each_other_by_any_path() {
    let graph = file_graph(&workspace().join("agent-errors/src"));
    assert!(
        graph
            .get(&module("agent/run"))
            .is_some_and(|targets| targets.contains(&module("agent/counts"))),
        "the scan follows `super::` paths between sibling files"
    );
    assert!(
        graph
            .get(&module("agent/conversation"))
            .is_some_and(|targets| targets.contains(&module("agent/outcome"))),
        "the scan follows a name through the parent that re-exports it (`super::RunError`)"
    );
    let problems = file_cycles(&graph);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

fn module(path: &str) -> Module {
    path.split('/').map(str::to_owned).collect()
}

#[test]
fn super_self_and_grouped_paths_are_read_from_the_file_they_are_in() {
    let code = "use super::counts::Counts;\nuse super::super::chat::Message;\nuse self::inner::X;\nuse crate::{retry::{Step, decide}, agent::durable::{self, SavedRun}};\nuse $crate::x; fn f() -> a::super::B {}";
    let paths = module_paths(&code_of(code), &module("agent/run"));
    let expected = [
        "agent/counts/Counts",
        "chat/Message",
        "agent/run/inner/X",
        "retry/Step",
        "retry/decide",
        "agent/durable",
        "agent/durable/SavedRun",
    ];
    assert_eq!(paths, expected.map(module));
}

#[test]
fn two_sibling_files_that_import_each_other_through_super_are_a_cycle() {
    let mut graph = graph_of(
        &sources([
            ("agent", ""),
            ("agent/a", "use super::b::Thing;"),
            ("agent/b", "use super::{c::Other, a};"),
            ("agent/c", "use crate::agent::Agent;"),
        ]),
        &BTreeMap::new(),
    );
    assert_eq!(
        file_cycles(&graph),
        ["files import each other: agent/a -> agent/b -> agent/a"]
    );
    graph
        .get_mut(&module("agent/b"))
        .expect("b")
        .remove(&module("agent/a"));
    assert_eq!(
        file_cycles(&graph),
        Vec::<String>::new(),
        "a line of imports is no cycle"
    );
}

fn sources<const N: usize>(files: [(&str, &str); N]) -> BTreeMap<Module, String> {
    files
        .into_iter()
        .map(|(at, code)| (module(at), code_of(code)))
        .collect()
}

#[test]
fn two_sibling_files_that_import_each_other_through_their_parents_re_exports_are_a_cycle() {
    let graph = graph_of(
        &sources([
            (
                "agent",
                "mod a;\nmod b;\npub use a::Thing;\n#[cfg(test)] pub(crate) use self::b::{Other, x::Y};",
            ),
            ("agent/a", "use super::Other;"),
            ("agent/b", "use super::Thing;"),
            ("agent/b/x", ""),
            ("agent/c", "use super::{Y, Agent};"),
        ]),
        &BTreeMap::new(),
    );
    assert_eq!(
        file_cycles(&graph),
        ["files import each other: agent/a -> agent/b -> agent/a"]
    );
    assert_eq!(
        graph[&module("agent/c")],
        BTreeSet::from([module("agent"), module("agent/b/x")]),
        "a name the parent does not take from a child is the parent's"
    );
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

#[test]
fn an_import_that_points_up_is_reported_with_both_floors() {
    let floors = vec![set(&["error"]), set(&["chat"])];
    let code =
        "use crate::chat::{ToolCall, Message};\nfn f() -> crate::error::BoxError { todo!() }";
    let mut imports = Imports::new();
    imports.insert(
        "error".into(),
        crate_paths(&code_of(code)).into_iter().collect(),
    );
    let problems = violations(&floors, &set(&["error", "chat"]), &imports);
    assert_eq!(
        problems,
        ["`error` (floor 1) imports `chat` (floor 2), which is above it"]
    );
}

#[test]
fn a_cycle_within_a_floor_and_a_module_without_a_floor_are_reported() {
    let floors = vec![set(&["a", "b"])];
    let mut imports = Imports::new();
    imports.insert("a".into(), set(&["b"]));
    imports.insert("b".into(), set(&["a"]));
    let problems = violations(&floors, &set(&["a", "b", "c"]), &imports);
    assert!(problems.contains(&"module `c` has no floor in ARCHITECTURE.md".to_owned()));
    assert!(
        problems
            .iter()
            .any(|p| p.contains("form a cycle: a -> b -> a")),
        "{problems:?}"
    );
}

#[test]
fn paths_in_comments_tests_and_other_crates_are_not_imports() {
    let code = "// use crate::agent::Agent;\nuse $crate::x; use my_crate::y;\nuse crate::{retry::{Step, decide}, error};\n#[cfg(test)]\nmod tests { use crate::agent::Agent; }";
    assert_eq!(crate_paths(&code_of(code)), ["retry", "error"]);
}

#[test]
fn a_root_re_export_counts_as_an_import_of_its_module() {
    let lib = "pub use chat::{ChatRequest, Message};\npub use model::ChatModel;\nmod chat;";
    let exports = root_exports(lib);
    assert_eq!(exports["Message"], "chat");
    assert_eq!(exports["ChatModel"], "model");
}
