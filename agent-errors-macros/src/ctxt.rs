//! Error collection: every problem is reported, not just the first, and none can be lost.

use std::cell::RefCell;
use std::fmt::Display;
use std::thread;

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use syn::parse::ParseStream;

/// Compile errors gathered while parsing or validating, reported together.
///
/// It must be consumed by [`check`](Ctxt::check): dropping it unchecked panics, so an error
/// pushed on some path that forgot to look cannot vanish from the output.
pub(crate) struct Ctxt {
    errors: RefCell<Option<Vec<syn::Error>>>,
}

impl Ctxt {
    pub(crate) fn new() -> Self {
        Ctxt {
            errors: RefCell::new(Some(Vec::new())),
        }
    }

    pub(crate) fn push(&self, error: syn::Error) {
        self.errors
            .borrow_mut()
            .as_mut()
            .expect("a checked Ctxt takes no more errors")
            .push(error);
    }

    /// An error spanned on `tokens`.
    pub(crate) fn error_spanned_by(&self, tokens: impl ToTokens, message: impl Display) {
        self.push(syn::Error::new_spanned(tokens, message));
    }

    /// An error at `span`, for spans that are not tokens (a group's delimiters).
    pub(crate) fn error_at(&self, span: Span, message: impl Display) {
        self.push(syn::Error::new(span, message));
    }

    /// How many errors so far: a caller compares counts to learn whether one step failed.
    pub(crate) fn error_count(&self) -> usize {
        self.errors.borrow().as_ref().map_or(0, Vec::len)
    }

    pub(crate) fn has_errors(&self) -> bool {
        self.error_count() > 0
    }

    /// Every error at once, combined, or `Ok` when nothing went wrong.
    pub(crate) fn check(self) -> syn::Result<()> {
        let errors = self
            .errors
            .borrow_mut()
            .take()
            .expect("a Ctxt is checked once");
        let mut errors = errors.into_iter();
        let Some(mut combined) = errors.next() else {
            return Ok(());
        };
        for rest in errors {
            combined.combine(rest);
        }
        Err(combined)
    }

    /// `Ok(value)` when nothing went wrong, else every error at once.
    pub(crate) fn finish<T>(self, value: T) -> syn::Result<T> {
        self.check().map(|()| value)
    }
}

impl Drop for Ctxt {
    fn drop(&mut self) {
        if !thread::panicking() && self.errors.borrow().is_some() {
            panic!("forgot to check for errors");
        }
    }
}

/// A setting that may be given once. A second occurrence is an error spanned on it, so every
/// "`x` is set twice" message is written here and nowhere else.
pub(crate) struct SetOnce<T> {
    what: &'static str,
    value: Option<T>,
}

impl<T> SetOnce<T> {
    /// `what` names the kind of setting in the message: "key", "argument".
    pub(crate) fn new(what: &'static str) -> Self {
        SetOnce { what, value: None }
    }

    /// Sets the value, or reports `name` (spanned on `at`) when it is already set.
    pub(crate) fn set(&mut self, cx: &Ctxt, at: impl ToTokens, name: &str, value: T) {
        if self.value.is_some() {
            cx.error_spanned_by(
                at,
                format_args!("`{name}` is set twice: give each {} once", self.what),
            );
        } else {
            self.value = Some(value);
        }
    }

    pub(crate) fn get(self) -> Option<T> {
        self.value
    }
}

/// Parses `item, item, ...` to the end of `input` (a trailing comma is fine). A bad item is
/// reported and skipped up to the next comma, so one mistake does not hide the next.
///
/// Every group this crate enters is read with this function, which always consumes the whole
/// group: syn would otherwise report leftover tokens a second time.
pub(crate) fn parse_list<T>(
    input: ParseStream<'_>,
    cx: &Ctxt,
    mut item: impl FnMut(ParseStream<'_>) -> syn::Result<T>,
) -> Vec<T> {
    let mut items = Vec::new();
    while !input.is_empty() {
        match item(input) {
            Ok(value) => {
                items.push(value);
                if input.is_empty() {
                    break;
                }
                if let Err(error) = input.parse::<syn::Token![,]>() {
                    cx.push(error);
                    skip_past_comma(input);
                }
            }
            Err(error) => {
                cx.push(error);
                skip_past_comma(input);
            }
        }
    }
    items
}

fn skip_past_comma(input: ParseStream<'_>) {
    // Stepping over whole token trees cannot fail.
    let _ = input.step(|cursor| {
        let mut rest = *cursor;
        while let Some((tt, next)) = rest.token_tree() {
            rest = next;
            if matches!(&tt, proc_macro2::TokenTree::Punct(p) if p.as_char() == ',') {
                break;
            }
        }
        Ok(((), rest))
    });
}

/// Runs `parse` over `tokens` with errors going to `cx`; the parser itself never fails, so
/// what it read is kept even when some of it was wrong.
pub(crate) fn parse_all<T>(
    cx: &Ctxt,
    tokens: TokenStream,
    parse: impl FnOnce(ParseStream<'_>, &Ctxt) -> T,
) -> T {
    let before = cx.error_count();
    let mut out = None;
    let parser = |input: ParseStream<'_>| {
        out = Some(parse(input, cx));
        // A failed parse keeps syn from also reporting the tokens a reported error left unread
        // (inside `escalate(now)`, say): that would be the same mistake twice.
        if cx.error_count() > before {
            Err(input.error("already reported"))
        } else {
            Ok(())
        }
    };
    if let Err(error) = syn::parse::Parser::parse2(parser, tokens) {
        if cx.error_count() == before {
            cx.push(error);
        }
    }
    out.expect("the parser ran")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[should_panic(expected = "forgot to check for errors")]
    fn an_unchecked_context_panics() {
        let cx = Ctxt::new();
        cx.error_at(Span::call_site(), "lost");
    }

    #[test]
    fn every_error_comes_out_of_check() {
        let cx = Ctxt::new();
        cx.error_at(Span::call_site(), "one");
        cx.error_at(Span::call_site(), "two");
        let messages: Vec<String> = cx
            .check()
            .unwrap_err()
            .into_iter()
            .map(|e| e.to_string())
            .collect();
        assert_eq!(messages, ["one", "two"]);
    }
}
