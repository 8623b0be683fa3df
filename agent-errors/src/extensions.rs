//! Values given to one run (the user's identity, a token, a tenant) that its tools, fixers and
//! permission hook can ask for by type, without the model ever seeing them.

use std::any::{Any, TypeId, type_name};
use std::collections::HashMap;
use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, OnceLock};

use crate::idempotency::IdempotencyKey;

type Values = HashMap<TypeId, Arc<dyn Any + Send + Sync>>;

/// A map from type to one value of that type, given to a run with
/// [`RunOptions::context`](crate::RunOptions::context) or
/// [`RunContext::with_extensions`](crate::RunContext::with_extensions).
///
/// Cloning is cheap: the values are shared, never copied.
///
/// # Examples
///
/// ```
/// use agent_errors::call::Extensions;
///
/// struct UserId(u64);
///
/// let extensions = Extensions::new().with(UserId(7));
/// assert_eq!(extensions.get::<UserId>().map(|u| u.0), Some(7));
/// assert!(extensions.get::<String>().is_none());
/// ```
#[derive(Clone, Default)]
pub struct Extensions {
    /// `None` until a value is added: a run given no values allocates (and frees) no map.
    values: Option<Arc<Values>>,
    /// The call these values were handed to: kept beside the map so giving each call its key
    /// costs no copy of the run's values.
    call: Option<CallKey>,
}

/// What a call's [`IdempotencyKey`] is made of, and the key once a tool asks for it: a call
/// whose tools never ask builds none.
#[derive(Clone)]
struct CallKey {
    run_id: Arc<str>,
    call_id: Arc<str>,
    built: OnceLock<Arc<dyn Any + Send + Sync>>,
}

impl CallKey {
    fn key(&self) -> &Arc<dyn Any + Send + Sync> {
        self.built.get_or_init(|| {
            let key = IdempotencyKey::new(Arc::clone(&self.run_id), Arc::clone(&self.call_id));
            Arc::new(key)
        })
    }
}

impl Extensions {
    /// An empty map.
    pub fn new() -> Self {
        Extensions::default()
    }

    /// The map with `value` added; a value of the same type is replaced.
    #[must_use]
    pub fn with<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.insert(value);
        self
    }

    /// Adds `value`, replacing a value of the same type.
    pub fn insert<T: Send + Sync + 'static>(&mut self, value: T) {
        let values = self.values.get_or_insert_with(Arc::default);
        Arc::make_mut(values).insert(TypeId::of::<T>(), Arc::new(value));
    }

    /// The value of type `T`, if the run was given one.
    pub fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.value(TypeId::of::<T>())
            .and_then(|value| value.downcast_ref())
    }

    /// The value of type `T`, shared, or the error a tool shows when it is missing.
    pub fn ctx<T: Send + Sync + 'static>(&self) -> Result<Ctx<T>, MissingContext> {
        self.value(TypeId::of::<T>())
            .and_then(|value| Arc::clone(value).downcast::<T>().ok())
            .map(Ctx)
            .ok_or(MissingContext {
                type_name: type_name::<T>(),
            })
    }

    /// Whether a run given this map has a value of the type `id` for its calls: a call's
    /// idempotency key is given to each call by the run itself.
    pub(crate) fn holds(&self, id: TypeId) -> bool {
        id == TypeId::of::<IdempotencyKey>() || self.value(id).is_some()
    }

    fn value(&self, id: TypeId) -> Option<&Arc<dyn Any + Send + Sync>> {
        // Only a call's own key answers for its type: a key given as a run value would name no
        // call in particular.
        if id == TypeId::of::<IdempotencyKey>() {
            return self.call.as_ref().map(CallKey::key);
        }
        self.values.as_ref()?.get(&id)
    }

    /// A copy of these values (a clone), made without a call to `clone` when they belong to
    /// no call: every executor call outside a run copies its context's values, and the clone
    /// of the call's part, out of line, cost each about 25 instructions.
    #[inline]
    pub(crate) fn copied(&self) -> Extensions {
        match &self.call {
            None => Extensions {
                values: self.values.clone(),
                call: None,
            },
            Some(_) => self.clone(),
        }
    }

    /// These values, handed to the call `call_id` of the run `run_id`: its tools and fixers also
    /// find its [`IdempotencyKey`], built when one first asks.
    pub(crate) fn for_call(&self, run_id: &Arc<str>, call_id: &Arc<str>) -> Extensions {
        Extensions {
            values: self.values.clone(),
            call: Some(CallKey {
                run_id: Arc::clone(run_id),
                call_id: Arc::clone(call_id),
                built: OnceLock::new(),
            }),
        }
    }

    /// How many values the map holds, a call's idempotency key included.
    pub fn len(&self) -> usize {
        self.values_len() + usize::from(self.call.is_some())
    }

    /// How many values the run was given.
    fn values_len(&self) -> usize {
        self.values.as_ref().map_or(0, |values| values.len())
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl fmt::Debug for Extensions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Extensions")
            .field("len", &self.values_len())
            .finish_non_exhaustive()
    }
}

/// Two maps are equal when they hold the same values, shared: a clone equals its original.
impl PartialEq for Extensions {
    fn eq(&self, other: &Self) -> bool {
        let same_key = match (&self.call, &other.call) {
            (None, None) => true,
            (Some(ours), Some(theirs)) => {
                ours.run_id == theirs.run_id && ours.call_id == theirs.call_id
            }
            _ => false,
        };
        same_key
            && self.values_len() == other.values_len()
            && self
                .values
                .iter()
                .flat_map(|values| values.iter())
                .all(|(id, value)| {
                    other
                        .values
                        .as_ref()
                        .and_then(|theirs| theirs.get(id))
                        .is_some_and(|theirs| Arc::ptr_eq(value, theirs))
                })
    }
}

/// A value of the run's [`Extensions`], asked for by type.
///
/// A `#[tool]` or `#[fixer]` parameter of type `Ctx<T>` is filled from the run instead of the
/// model's arguments, and the schema does not show it. A run that was not given a `T` answers
/// the call with a [`MissingContext`] error result (the tool does not run).
///
/// # Examples
///
/// ```
/// use agent_errors::prelude::*;
/// use agent_errors::Ctx;
///
/// struct Tenant(String);
///
/// /// Lists the tenant's invoices.
/// #[tool]
/// async fn invoices(tenant: Ctx<Tenant>, limit: u32) -> String {
///     format!("{limit} invoices of {}", tenant.0)
/// }
///
/// let tools = tools![invoices];
/// assert!(tools[0].parameters()["properties"].get("tenant").is_none());
/// ```
pub struct Ctx<T: ?Sized>(Arc<T>);

impl<T: ?Sized> Ctx<T> {
    /// The shared value.
    pub fn into_arc(this: Self) -> Arc<T> {
        this.0
    }
}

impl<T: ?Sized> Clone for Ctx<T> {
    fn clone(&self) -> Self {
        Ctx(Arc::clone(&self.0))
    }
}

impl<T: ?Sized> Deref for Ctx<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for Ctx<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Ctx").field(&&*self.0).finish()
    }
}

/// A tool or fixer asked for a context value the run was not given. Classified
/// [`Bug`](crate::ErrorKind::Bug): the caller forgot to pass it, and the model cannot fix that.
///
/// # Examples
///
/// ```
/// use agent_errors::call::{Extensions, MissingContext};
///
/// #[derive(Debug)]
/// struct TenantId(String);
///
/// let given = Extensions::new(); // the run was not given a TenantId
/// let missing: MissingContext = given.ctx::<TenantId>().unwrap_err();
/// assert!(missing.type_name.ends_with("TenantId"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("this tool needs a `{type_name}` that the run was not given")]
pub struct MissingContext {
    /// The type asked for.
    pub type_name: &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_found_by_type_and_replaced_by_type() {
        let mut map = Extensions::new().with(1_u32).with("a");
        map.insert(2_u32);
        assert_eq!(map.get::<u32>(), Some(&2));
        assert_eq!(map.get::<&str>(), Some(&"a"));
        assert_eq!(map.len(), 2);
        assert_eq!(*map.ctx::<u32>().expect("set above"), 2);
        let missing = map.ctx::<String>().expect_err("never set");
        assert!(missing.to_string().contains("String"));
    }

    #[test]
    fn a_clone_shares_and_equals_its_original() {
        let map = Extensions::new().with(3_u8);
        let clone = map.clone();
        assert_eq!(map, clone);
        assert_ne!(map, Extensions::new().with(3_u8));
    }
}
