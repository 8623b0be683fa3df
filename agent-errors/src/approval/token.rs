//! The text form of an answer a client carries: base64url without padding (RFC 4648 section 5),
//! so it goes in a URL path, a query string, a form field or a header as it is, and says
//! nothing to the eye. Both directions are linear in the text and allocate once.

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// `bytes` as base64url, unpadded.
pub(super) fn encode(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        // A chunk of k bytes is k + 1 characters.
        for i in 0..=chunk.len() {
            let sextet = (n >> (18 - 6 * i)) & 0x3f;
            text.push(char::from(ALPHABET[sextet as usize]));
        }
    }
    text
}

/// The value of one base64url character.
fn sextet(c: u8) -> Option<u32> {
    let value = match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'-' => 62,
        b'_' => 63,
        _ => return None,
    };
    Some(u32::from(value))
}

/// The bytes of unpadded base64url `text`; `Err(at)`, the byte offset of the first character
/// that is not base64url, or the text's length when it cannot end where it does.
pub(super) fn decode(text: &str) -> Result<Vec<u8>, usize> {
    let text = text.as_bytes();
    if text.len() % 4 == 1 {
        return Err(text.len());
    }
    let mut bytes = Vec::with_capacity(text.len() / 4 * 3 + 2);
    for (index, chunk) in text.chunks(4).enumerate() {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= sextet(c).ok_or(index * 4 + i)? << (18 - 6 * i);
        }
        let decoded = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        bytes.extend_from_slice(&decoded[..chunk.len() - 1]);
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::{decode, encode};

    #[test]
    fn round_trips_every_length_and_byte() {
        let all: Vec<u8> = (0..=255).collect();
        for len in 0..all.len() {
            let text = encode(&all[..len]);
            assert!(
                text.bytes()
                    .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
            );
            assert_eq!(decode(&text), Ok(all[..len].to_vec()), "{len} bytes");
        }
    }

    #[test]
    fn matches_the_rfc_test_vectors_without_padding() {
        let vectors = [
            ("", ""),
            ("f", "Zg"),
            ("fo", "Zm8"),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg"),
            ("fooba", "Zm9vYmE"),
            ("foobar", "Zm9vYmFy"),
        ];
        for (plain, coded) in vectors {
            assert_eq!(encode(plain.as_bytes()), coded);
        }
        assert_eq!(encode(&[0xfb, 0xff]), "-_8", "the URL-safe alphabet");
    }

    #[test]
    fn refuses_what_is_not_base64url() {
        assert_eq!(decode("Zm9v+g"), Err(4), "standard base64's `+`");
        assert_eq!(decode("Zm9vY"), Err(5), "no text of 4n + 1 characters");
        assert_eq!(decode("Zm8="), Err(3), "no padding");
    }
}
