//! The Lua scripts that make every transition atomic across processes. Each runs whole on the
//! server (`EVALSHA`, loaded on first use), reads the server's clock (`TIME`), so processes need
//! not agree on the time, and sets an expiry (`PEXPIRE`) on everything it writes, so a process
//! that dies leaves nothing stuck.
//!
//! A breaker is one hash, `<prefix>:breaker:<key>`:
//! - `fails`: failures since the last success;
//! - `open_until`: while the server clock is before it, the circuit is open; once past, it is
//!   half-open;
//! - `probe_until`, `probe_owner`: the half-open probe's lease and the process holding it.
//!
//! The scripts answer with a view `{code, fails, remaining_ms}`: code 0 closed, 1 open,
//! 2 half-open with the probe out, 3 half-open with the probe free, 4 the probe granted to the
//! caller; `remaining_ms` is how long the open or probe-out state lasts.

use std::sync::LazyLock;

use redis::Script;

/// Shared by the breaker scripts: the server clock, and the view of one breaker.
const PRELUDE: &str = r"
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function view(key, now)
  local h = redis.call('HMGET', key, 'fails', 'open_until', 'probe_until')
  local fails = tonumber(h[1]) or 0
  local open_until = tonumber(h[2])
  local probe_until = tonumber(h[3])
  if not open_until then return {0, fails, 0} end
  if now < open_until then return {1, fails, open_until - now} end
  if probe_until and now < probe_until then return {2, fails, probe_until - now} end
  return {3, fails, 0}
end
";

/// Asks to call: the view, and when the circuit is half-open with the probe free, the probe
/// is leased to the caller (`ARGV`: owner, lease ms, idle ttl ms). Only one caller can find
/// it free: the lease is written in the same script that saw it free.
const ADMIT: &str = r"
local now = now_ms()
local v = view(KEYS[1], now)
if v[1] ~= 3 then return v end
local lease = tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'probe_until', now + lease, 'probe_owner', ARGV[1])
redis.call('PEXPIRE', KEYS[1], lease + tonumber(ARGV[3]))
return {4, v[2], lease}
";

/// Records an outcome (`ARGV`: ok 0/1, probe 0/1, owner, threshold, cooldown ms, idle ttl ms).
/// A success closes the circuit, as in memory. A failure counts; reaching the threshold, or
/// failing the probe, opens it for the cooldown. A closed circuit's count expires after the
/// idle ttl; an open one's after the cooldown and the idle ttl. The view comes with a fourth
/// value: 1 when this report opened the circuit (it was not open, or it was half-open), 2 when
/// it closed one, 0 otherwise.
const REPORT: &str = r"
local now = now_ms()
local key = KEYS[1]
local open_until = tonumber(redis.call('HGET', key, 'open_until'))
if ARGV[1] == '1' then
  redis.call('DEL', key)
  if open_until then return {0, 0, 0, 2} end
  return {0, 0, 0, 0}
end
local probe = ARGV[2] == '1' and redis.call('HGET', key, 'probe_owner') == ARGV[3]
local fails = redis.call('HINCRBY', key, 'fails', 1)
local cooldown = tonumber(ARGV[5])
local change = 0
if probe or fails >= tonumber(ARGV[4]) then
  if probe or not open_until or now >= open_until then change = 1 end
  redis.call('HSET', key, 'open_until', now + cooldown)
  redis.call('HDEL', key, 'probe_until', 'probe_owner')
  redis.call('PEXPIRE', key, cooldown + tonumber(ARGV[6]))
elseif not open_until then
  redis.call('PEXPIRE', key, tonumber(ARGV[6]))
end
local v = view(key, now)
return {v[1], v[2], v[3], change}
";

/// Gives back a probe that will never report (`ARGV`: owner).
const RELEASE: &str = r"
if redis.call('HGET', KEYS[1], 'probe_owner') == ARGV[1] then
  redis.call('HDEL', KEYS[1], 'probe_until', 'probe_owner')
end
return view(KEYS[1], now_ms())
";

/// The view, changing nothing.
const VIEW: &str = "return view(KEYS[1], now_ms())";

/// A retry budget: one hash per key, `<prefix>:budget:<key>`, with fields `c:<bucket>` (calls)
/// and `r:<bucket>` (retries) per bucket of the window (`ARGV`: bucket ms, buckets, ratio,
/// floor, calls to add, spend 0/1). Adds the calls, drops buckets that left the window, and
/// when asked to spend, takes one retry if `retries < max(floor, floor(ratio × calls))`.
/// Answers `{granted, calls, retries}`.
const BUDGET: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local bucket_ms = tonumber(ARGV[1])
local buckets = tonumber(ARGV[2])
local current = math.floor(now / bucket_ms)
local add = tonumber(ARGV[5])
if add > 0 then redis.call('HINCRBY', KEYS[1], 'c:' .. current, add) end
local all = redis.call('HGETALL', KEYS[1])
local calls, retries = 0, 0
for i = 1, #all, 2 do
  local field = all[i]
  local bucket = tonumber(string.sub(field, 3))
  if bucket == nil or bucket <= current - buckets then
    redis.call('HDEL', KEYS[1], field)
  elseif string.sub(field, 1, 1) == 'c' then
    calls = calls + tonumber(all[i + 1])
  else
    retries = retries + tonumber(all[i + 1])
  end
end
local allowed = math.max(tonumber(ARGV[4]), math.floor(calls * tonumber(ARGV[3])))
local granted = 0
if ARGV[6] == '1' and retries < allowed then
  redis.call('HINCRBY', KEYS[1], 'r:' .. current, 1)
  retries = retries + 1
  granted = 1
end
redis.call('PEXPIRE', KEYS[1], bucket_ms * (buckets + 1))
return {granted, calls, retries}
";

fn breaker_script(body: &str) -> Script {
    Script::new(&format!("{PRELUDE}{body}"))
}

pub(crate) static ADMIT_SCRIPT: LazyLock<Script> = LazyLock::new(|| breaker_script(ADMIT));
pub(crate) static REPORT_SCRIPT: LazyLock<Script> = LazyLock::new(|| breaker_script(REPORT));
pub(crate) static RELEASE_SCRIPT: LazyLock<Script> = LazyLock::new(|| breaker_script(RELEASE));
pub(crate) static VIEW_SCRIPT: LazyLock<Script> = LazyLock::new(|| breaker_script(VIEW));
pub(crate) static BUDGET_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(BUDGET));
