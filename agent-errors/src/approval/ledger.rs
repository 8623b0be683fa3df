//! The answers this process has used: an answer bound to a question is used once in the
//! process, whichever run takes it. A run's own record of its answers stops a copy delivered to
//! it twice; this one stops one answer from being taken by two runs that share a run id (a
//! caller's id reused without a store, whose runs ask the same question under the same digest).

use std::collections::{HashSet, VecDeque};
use std::sync::{Mutex, PoisonError};

use sha2::{Digest as _, Sha256};

/// The most answers remembered; past it the oldest is forgotten. Each takes 32 bytes and its
/// place in the queue, about 3 MiB in all.
const REMEMBERED: usize = 1 << 16;

#[derive(Default)]
struct Used {
    seen: HashSet<[u8; 32]>,
    order: VecDeque<[u8; 32]>,
}

static USED: Mutex<Option<Used>> = Mutex::new(None);

/// Takes the answer written as `token` for its one use in this process: false when a run took
/// it already.
pub(crate) fn first_use_in_process(token: &str) -> bool {
    let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
    let mut used = USED.lock().unwrap_or_else(PoisonError::into_inner);
    let used = used.get_or_insert_with(Used::default);
    if !used.seen.insert(key) {
        return false;
    }
    used.order.push_back(key);
    if used.order.len() > REMEMBERED {
        if let Some(oldest) = used.order.pop_front() {
            used.seen.remove(&oldest);
        }
    }
    true
}
