//! The hashes upstream names controller-made objects with: FNV-1a (32 bit) of the object's content, written with
//! `rand.SafeEncodeString`'s alphabet (no vowels, so a name never spells a word).

/// The characters `rand.SafeEncodeString` maps bytes to.
pub const SAFE_ALPHABET: &str = "bcdfghjklmnpqrstvwxz2456789";

/// `rand.SafeEncodeString`: each byte of `s` mapped onto [`SAFE_ALPHABET`].
pub fn safe_encode(s: &str) -> String {
    let alphabet = SAFE_ALPHABET.as_bytes();
    s.bytes()
        .map(|b| alphabet[b as usize % alphabet.len()] as char)
        .collect()
}

/// 32-bit FNV-1a.
pub fn fnv32a(data: &[u8]) -> u32 {
    let mut h: u32 = 0x811c9dc5;
    for b in data {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x01000193);
    }
    h
}

/// The safe-encoded decimal FNV-1a of `data`, with a non-zero `collision_count` appended first (as upstream's
/// `ComputeHash` does, so a collision yields a different name).
pub fn content_hash(mut data: Vec<u8>, collision_count: i32) -> String {
    if collision_count > 0 {
        data.extend_from_slice(collision_count.to_string().as_bytes());
    }
    safe_encode(&fnv32a(&data).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_matches_the_reference_vectors() {
        assert_eq!(fnv32a(b""), 0x811c9dc5);
        assert_eq!(fnv32a(b"a"), 0xe40c292c);
        assert_eq!(fnv32a(b"foobar"), 0xbf9cf968);
    }

    #[test]
    fn collisions_change_the_hash() {
        let a = content_hash(b"x".to_vec(), 0);
        assert_eq!(a, content_hash(b"x".to_vec(), 0));
        assert_ne!(a, content_hash(b"x".to_vec(), 1));
        assert!(a.chars().all(|c| SAFE_ALPHABET.contains(c)));
    }
}
