//! A digest of a JSON value that is the same in every process, build and Rust release: the
//! value written in one canonical form and hashed with FNV-1a/128.
//!
//! `std`'s `DefaultHasher` may change between releases and `serde_json`'s object order depends
//! on which of its features the build unifies (`preserve_order` keeps insertion order), so
//! neither can name a thing that a service remembers across deploys.

use std::io;

use serde_json::{Number, Value};

const FNV_OFFSET_BASIS: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
const FNV_PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;

/// FNV-1a with a 128-bit state: a few lines, no table, stable by its definition.
struct Fnv1a128(u128);

impl Fnv1a128 {
    fn new() -> Self {
        Fnv1a128(FNV_OFFSET_BASIS)
    }

    fn update(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 ^= u128::from(*byte);
            self.0 = self.0.wrapping_mul(FNV_PRIME);
        }
    }
}

/// Lets `serde_json` write scalars straight into the hash, exactly as it writes them anywhere.
impl io::Write for Fnv1a128 {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.update(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Every integer from -2^53 to 2^53 is exact as an `f64`: a float in that range with no
/// fraction is written as the integer it equals.
const EXACT_INTEGERS: f64 = 9_007_199_254_740_992.0;

/// The FNV-1a/128 hash of `value` written as compact JSON with every object's keys sorted by
/// their UTF-8 bytes, numbers by their value ([`write_number`]), strings as `serde_json` writes
/// them.
pub(crate) fn canonical_digest(value: &Value) -> Result<u128, serde_json::Error> {
    let mut hasher = Fnv1a128::new();
    write_canonical(&mut hasher, value)?;
    Ok(hasher.0)
}

/// Recursion is bounded by the value's depth, which `serde_json` caps at 128 for parsed text.
fn write_canonical(hasher: &mut Fnv1a128, value: &Value) -> Result<(), serde_json::Error> {
    match value {
        Value::Array(items) => {
            hasher.update(b"[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    hasher.update(b",");
                }
                write_canonical(hasher, item)?;
            }
            hasher.update(b"]");
        }
        Value::Object(fields) => {
            let mut sorted: Vec<(&String, &Value)> = fields.iter().collect();
            sorted.sort_unstable_by(|(a, _), (b, _)| a.as_bytes().cmp(b.as_bytes()));
            hasher.update(b"{");
            for (i, (key, field)) in sorted.into_iter().enumerate() {
                if i > 0 {
                    hasher.update(b",");
                }
                serde_json::to_writer(&mut *hasher, key)?;
                hasher.update(b":");
                write_canonical(hasher, field)?;
            }
            hasher.update(b"}");
        }
        Value::Number(number) => write_number(hasher, number)?,
        scalar => serde_json::to_writer(&mut *hasher, scalar)?,
    }
    Ok(())
}

/// JSON has one kind of number, so `1`, `1.0`, `1e0` and a typed `f64` of 1 are one value and
/// `-0` is `0`: an integer as an integer, a float with no fraction within +-2^53 as the integer
/// it equals, any other float as `serde_json` writes an `f64` (its shortest round trip).
/// Reading the value back, rather than copying its text, also keeps the key the same when a
/// build unifies `serde_json`'s `arbitrary_precision` (which keeps `1.00` as written).
fn write_number(hasher: &mut Fnv1a128, number: &Number) -> Result<(), serde_json::Error> {
    if let Some(n) = number.as_u64() {
        return serde_json::to_writer(hasher, &n);
    }
    if let Some(n) = number.as_i64() {
        return serde_json::to_writer(hasher, &n);
    }
    match number.as_f64() {
        // Integral and within +-2^53: the cast is exact.
        Some(f) if f.fract() == 0.0 && f.abs() <= EXACT_INTEGERS => {
            serde_json::to_writer(hasher, &(f as i64))
        }
        Some(f) => serde_json::to_writer(hasher, &f),
        // Only a number beyond `f64` under `arbitrary_precision`: its text is all there is.
        None => serde_json::to_writer(hasher, number),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fnv(bytes: &[u8]) -> u128 {
        let mut hasher = Fnv1a128::new();
        hasher.update(bytes);
        hasher.0
    }

    #[test]
    fn fnv1a_128_matches_the_published_vectors() {
        assert_eq!(fnv(b""), 0x6c62272e07bb014262b821756295c58d);
        assert_eq!(fnv(b"a"), 0xd228cb696f1a8caf78912b704e4a8964);
        assert_eq!(fnv(b"foobar"), 0x343e1662793c64bf6f0d3597ba446f18);
    }

    #[test]
    fn the_digest_hashes_the_compact_json_with_sorted_keys() {
        let value = json!(["t", {"b": [1, 2.5, null], "a": "x\"\n", "c": {"z": true, "y": false}}]);
        let text = r#"["t",{"a":"x\"\n","b":[1,2.5,null],"c":{"y":false,"z":true}}]"#;
        assert_eq!(canonical_digest(&value).unwrap(), fnv(text.as_bytes()));
    }

    fn digest_of(text: &str) -> u128 {
        canonical_digest(&serde_json::from_str(text).unwrap()).unwrap()
    }

    #[test]
    fn numbers_are_hashed_by_their_value_not_their_spelling() {
        let one = digest_of("[1]");
        for same in ["[1.0]", "[1e0]", "[10e-1]", "[1.000]"] {
            assert_eq!(digest_of(same), one, "{same}");
        }
        assert_eq!(canonical_digest(&json!([1.0_f64])).unwrap(), one);
        assert_eq!(digest_of("[-0.0]"), digest_of("[0]"));
        assert_eq!(digest_of("[-0]"), digest_of("[0]"));
        assert_eq!(digest_of("[-3.0]"), digest_of("[-3]"));
        assert_eq!(digest_of("[2.5]"), fnv(b"[2.5]"));
        assert_eq!(digest_of("[1e300]"), fnv(b"[1e+300]"));
        assert_eq!(
            digest_of("[9007199254740992.0]"),
            fnv(b"[9007199254740992]")
        );
        assert_eq!(
            digest_of("[18446744073709551615]"),
            fnv(b"[18446744073709551615]")
        );
        assert_ne!(digest_of("[1.5]"), one);
        assert_ne!(digest_of(r#"["1"]"#), one);
    }

    #[test]
    fn escapes_in_strings_and_keys_are_hashed_as_the_text_they_stand_for() {
        assert_eq!(
            digest_of(r#"{"\u0061": "caf\u00e9 \ud83d\ude00"}"#),
            digest_of(r#"{"a": "café 😀"}"#)
        );
        assert_eq!(digest_of(r#"["\/"]"#), digest_of(r#"["/"]"#));
    }

    #[test]
    fn keys_sort_by_their_bytes_not_their_insertion() {
        let mut map = serde_json::Map::new();
        map.insert("é".into(), json!(1));
        map.insert("Z".into(), json!(2));
        map.insert("a".into(), json!(3));
        let text = r#"{"Z":2,"a":3,"é":1}"#;
        assert_eq!(
            canonical_digest(&Value::Object(map)).unwrap(),
            fnv(text.as_bytes())
        );
    }
}
