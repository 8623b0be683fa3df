//! Error collection: every problem is reported, not just the first.

use std::fmt::Display;

use proc_macro2::TokenStream;
use quote::ToTokens;
use syn::parse::ParseStream;

/// Compile errors gathered while parsing or validating, reported together.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(error),
            None => self.0 = Some(error),
        }
    }

    /// An error spanned on `tokens`.
    pub(crate) fn at(&mut self, tokens: impl ToTokens, message: impl Display) {
        self.push(syn::Error::new_spanned(tokens, message));
    }

    /// An error at `span`, for spans that are not tokens (a group's delimiters).
    pub(crate) fn at_span(&mut self, span: proc_macro2::Span, message: impl Display) {
        self.push(syn::Error::new(span, message));
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// `Ok(value)` when nothing went wrong, else every error at once.
    pub(crate) fn finish<T>(self, value: T) -> syn::Result<T> {
        match self.0 {
            Some(error) => Err(error),
            None => Ok(value),
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
    pub(crate) fn set(&mut self, errors: &mut Errors, at: impl ToTokens, name: &str, value: T) {
        if self.value.is_some() {
            errors.at(
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
    errors: &mut Errors,
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
                    errors.push(error);
                    skip_past_comma(input);
                }
            }
            Err(error) => {
                errors.push(error);
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

/// The item exactly as written, followed by the errors: one clear message, no cascade from a
/// missing item.
pub(crate) fn with_item(error: syn::Error, item: TokenStream) -> TokenStream {
    let mut out = error.to_compile_error();
    out.extend(item);
    out
}
