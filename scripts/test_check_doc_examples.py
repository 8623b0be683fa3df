"""Tests of check-doc-examples.py on small crates written for each case.

    python3 -m unittest discover -s scripts -p 'test_*.py'
"""

import importlib.util
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "check_doc_examples", Path(__file__).with_name("check-doc-examples.py")
)
check = importlib.util.module_from_spec(_spec)
sys.modules["check_doc_examples"] = check  # dataclasses look the module up by name
_spec.loader.exec_module(check)

EXAMPLE = '''
/// # Examples
///
/// ```
/// assert!(true);
/// ```
'''


class CheckDocExamplesTest(unittest.TestCase):
    def crate(self, files, proc_macro=False):
        """A crate in a temporary directory; `files` maps paths under `src/` to their text."""
        root = Path(tempfile.mkdtemp())
        (root / "Cargo.toml").write_text(
            '[package]\nname = "c"\n' + ("[lib]\nproc-macro = true\n" if proc_macro else "")
        )
        for path, text in files.items():
            (root / "src" / path).parent.mkdir(parents=True, exist_ok=True)
            (root / "src" / path).write_text(textwrap.dedent(text))
        return root

    def missing(self, files, proc_macro=False):
        items = check.public_items(self.crate(files, proc_macro))
        return sorted(i.name for i in items if check.example_problem(i.docs, i.kind))

    def names(self, files, proc_macro=False):
        return sorted(i.name for i in check.public_items(self.crate(files, proc_macro)))

    def test_every_kind_of_public_item_needs_an_example(self):
        lib = "#![deny(unreachable_pub)]\n" + "".join(
            f"/// Docs.\n{decl}\n" for decl in [
                "pub struct S;", "pub enum E { A }", "pub trait T {}", "pub fn f() {}",
                "pub async fn g() {}", "pub const fn h() {}", "pub union U { a: u8 }",
            ]
        )
        self.assertEqual(self.missing({"lib.rs": lib}), ["E", "S", "T", "U", "f", "g", "h"])

    def test_an_example_section_with_a_rust_block_satisfies_it(self):
        lib = "#![deny(unreachable_pub)]\n" + EXAMPLE + "pub struct S;\n"
        self.assertEqual(self.missing({"lib.rs": lib}), [])

    def test_an_ignored_or_non_rust_block_does_not(self):
        lib = """\
            #![deny(unreachable_pub)]
            /// # Examples
            ///
            /// ```ignore
            /// nope();
            /// ```
            pub struct Ignored;
            /// # Examples
            ///
            /// ```sql
            /// SELECT 1
            /// ```
            pub struct Sql;
            /// ```
            /// no_heading();
            /// ```
            pub struct NoHeading;
            /// # Examples
            ///
            /// ```no_run
            /// needs_a_server();
            /// ```
            pub struct NoRun;
            """
        self.assertEqual(self.missing({"lib.rs": lib}), ["Ignored", "NoHeading", "Sql"])

    def test_an_enum_example_shows_a_match(self):
        lib = "#![deny(unreachable_pub)]\n" + EXAMPLE + "pub enum Bare { A }\n" + """\
            /// # Examples
            ///
            /// ```
            /// let n = match Matched::A { Matched::A => 1 };
            /// ```
            pub enum Matched { A }
            """
        self.assertEqual(self.missing({"lib.rs": lib}), ["Bare"])

    def test_restricted_hidden_test_and_method_items_are_not_public(self):
        lib = """\
            #![deny(unreachable_pub)]
            pub(crate) struct Crate;
            pub(super) fn sup() {}
            pub(in crate::m) fn inside() {}
            #[doc(hidden)]
            pub struct Hidden;
            #[doc(hidden)]
            pub mod private { pub struct InHidden; }
            #[cfg(test)]
            mod tests { pub struct InTests; }
            struct Private;
            impl Private { pub fn method(&self) {} }
            trait Tr { fn provided(&self) {} }
            """
        self.assertEqual(self.names({"lib.rs": lib}), [])

    def test_modules_are_followed_to_their_files(self):
        files = {
            "lib.rs": "#![deny(unreachable_pub)]\nmod a;\nmod b;\nmod inline { mod deeper; pub struct InInline; }\n",
            "a.rs": "mod nested;\npub struct InA;\n",
            "a/nested.rs": "pub enum InNested { X }\n",
            "b/mod.rs": "pub trait InB {}\n",
            "inline/deeper.rs": "pub fn in_deeper() {}\n",
        }
        self.assertEqual(self.names(files), ["InA", "InB", "InInline", "InNested", "in_deeper"])

    def test_literals_and_comments_do_not_confuse_the_walk(self):
        lib = r'''
            #![deny(unreachable_pub)]
            /* a block comment with pub struct Fake1; and { */
            // pub struct Fake2;
            const A: &str = "pub struct Fake3; {";
            const B: &str = r#"pub struct "Fake4"; }"#;
            const C: char = '{';
            const D: u8 = b'\x7b';
            fn body<'a>(x: &'a str) -> &'a str { let _ = "}"; x }
            static S: Thing = Thing { a: 1 };
            pub struct Real;
            '''
        self.assertEqual(self.names({"lib.rs": lib}), ["Real"])

    def test_the_item_is_reported_at_its_line(self):
        lib = "#![deny(unreachable_pub)]\n\n/// Docs.\n#[derive(Debug)]\npub struct S;\n"
        [item] = check.public_items(self.crate({"lib.rs": lib}))
        self.assertEqual(item.line, 5)

    def test_a_crate_without_unreachable_pub_is_refused(self):
        with self.assertRaises(SystemExit):
            check.public_items(self.crate({"lib.rs": "pub struct S;\n"}))

    def test_a_proc_macro_crate_exports_its_macros(self):
        lib = """\
            #[proc_macro]
            pub fn shown(input: TokenStream) -> TokenStream { input }
            #[doc(hidden)]
            #[proc_macro]
            pub fn hidden(input: TokenStream) -> TokenStream { input }
            fn helper() {}
            mod inner { pub struct NotExported; }
            """
        self.assertEqual(self.missing({"lib.rs": lib}, proc_macro=True), ["shown"])


if __name__ == "__main__":
    unittest.main()
