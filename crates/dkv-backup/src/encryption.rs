//! Client-side encryption of backups: AES-256-GCM from `ring`, in records,
//! under a key the user keeps in a Secret.
//!
//! An encrypted object is a header, then the content in records of
//! [`RECORD_BYTES`] (the last one shorter), each sealed with its own tag:
//!
//! ```text
//! "DKVAES1\n"  u32 big-endian header length  header JSON
//! record 0: ciphertext of 64 KiB + 16-byte tag
//! record 1: ...
//! last record: ciphertext of 0..=64 KiB + 16-byte tag
//! ```
//!
//! The header names the algorithm, the key's id (a fingerprint, never the
//! key) and a random 32-byte salt. Each object is sealed with its own key,
//! derived from the user's key and the salt with HKDF-SHA256, so nonces
//! are a plain record counter and can never repeat under one key however
//! many objects the user's key protects. The nonce also says whether the
//! record is the last one (the STREAM construction), and every record
//! authenticates the whole header: records cannot be reordered, dropped,
//! moved between objects, or cut off at a record boundary without the
//! decryption failing.
//!
//! Both directions are push-based ([`Sealer`], [`Opener`]): bytes in, bytes
//! out, in constant memory, so they sit in a streaming upload or download.

use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::hkdf;
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use zeroize::Zeroizing;

/// The first bytes of every encrypted object.
pub const MAGIC: &[u8; 8] = b"DKVAES1\n";

/// Plaintext bytes per record.
pub const RECORD_BYTES: usize = 64 * 1024;

/// The name recorded in headers and artifact records.
pub const ALGORITHM: &str = "AES-256-GCM";

const KEY_LEN: usize = 32;
const TAG_LEN: usize = 16;
const SALT_LEN: usize = 32;
const HKDF_INFO: &[u8] = b"dkv.io/backup-encryption/v1";
/// A header is a few hundred bytes; anything larger is not ours.
const MAX_HEADER_LEN: usize = 4096;

/// Why a key or an encrypted object could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncryptionError {
    #[error(
        "{0}: an encryption key is 32 bytes: the raw bytes, 64 hexadecimal digits (openssl rand -hex 32) or their base64 (openssl rand -base64 32)"
    )]
    BadKey(String),
    #[error(
        "encrypted with key {wanted}, but {}",
        describe_available(wanted, available)
    )]
    MissingKey {
        wanted: String,
        available: Vec<String>,
    },
    #[error("not an encrypted dkv backup: {0}")]
    NotEncrypted(String),
    #[error("the encryption header is unreadable: {0}")]
    BadHeader(String),
    #[error(
        "record {record} does not decrypt with key {key_id}: the object was altered, damaged or cut short"
    )]
    Tampered { record: u64, key_id: String },
    #[error("more than 2^32 records under one key")]
    TooLong,
    #[error("no randomness from the operating system")]
    Random,
}

fn describe_available(wanted: &str, available: &[String]) -> String {
    if available.is_empty() {
        "no decryption key was given: set spec.bootstrap.restore.encryption.keySecret (or the cluster's spec.backup.encryption) to the Secret holding that key".to_owned()
    } else {
        format!(
            "the keys given have the ids {}: add the key with id {wanted} to the Secret",
            available.join(", ")
        )
    }
}

/// An AES-256 key. Its bytes are wiped when it is dropped and never
/// printed; [`Key::id`] names it in records and messages.
#[derive(Clone)]
pub struct Key {
    id: String,
    bytes: Zeroizing<[u8; KEY_LEN]>,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Key").field("id", &self.id).finish()
    }
}

impl Key {
    /// A key as kept in a Secret or a file: exactly 32 raw bytes, or 64
    /// hexadecimal digits, or base64 of 32 bytes (surrounding whitespace,
    /// such as a trailing newline, ignored in the text forms).
    pub fn parse(material: &[u8]) -> Result<Key, EncryptionError> {
        let mut bytes = Zeroizing::new([0u8; KEY_LEN]);
        if material.len() == KEY_LEN {
            bytes.copy_from_slice(material);
            return Ok(Key::from_bytes(bytes));
        }
        let text = material.trim_ascii();
        if text.len() == 2 * KEY_LEN && hex::decode_to_slice(text, &mut bytes[..]).is_ok() {
            return Ok(Key::from_bytes(bytes));
        }
        use base64::Engine as _;
        let decoded = Zeroizing::new(
            base64::engine::general_purpose::STANDARD
                .decode(text)
                .unwrap_or_default(),
        );
        if decoded.len() == KEY_LEN {
            bytes.copy_from_slice(&decoded);
            return Ok(Key::from_bytes(bytes));
        }
        Err(EncryptionError::BadKey(format!(
            "the key material is {} bytes and neither hexadecimal nor base64 of 32 bytes",
            material.len()
        )))
    }

    fn from_bytes(bytes: Zeroizing<[u8; KEY_LEN]>) -> Key {
        let mut digest = Sha256::new();
        digest.update(b"dkv.io/backup-key-id/v1\0");
        digest.update(&bytes[..]);
        let id = hex::encode(&digest.finalize()[..8]);
        Key { id, bytes }
    }

    /// A fingerprint of the key: 16 hexadecimal digits, the same for the
    /// same key in any of its forms. It reveals nothing of the key.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The object's own key: HKDF-SHA256 of this key with the object's salt.
    fn object_key(&self, salt: &[u8]) -> Result<LessSafeKey, EncryptionError> {
        let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, salt).extract(&self.bytes[..]);
        let info = [HKDF_INFO];
        // `expand` fails only for lengths HKDF cannot produce (over 8160
        // bytes); a key is 32.
        let okm = prk
            .expand(&info, &AES_256_GCM)
            .map_err(|_| EncryptionError::BadKey("HKDF refused to derive a key".to_owned()))?;
        Ok(LessSafeKey::new(UnboundKey::from(okm)))
    }
}

/// The keys a restore may decrypt with, found by id.
#[derive(Clone, Debug, Default)]
pub struct Keyring {
    keys: Vec<Key>,
}

impl Keyring {
    pub fn new(keys: impl IntoIterator<Item = Key>) -> Keyring {
        Keyring {
            keys: keys.into_iter().collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    pub fn into_keys(self) -> Vec<Key> {
        self.keys
    }

    pub fn ids(&self) -> Vec<String> {
        self.keys.iter().map(|k| k.id.clone()).collect()
    }

    pub fn find(&self, id: &str) -> Result<&Key, EncryptionError> {
        self.keys
            .iter()
            .find(|k| k.id == id)
            .ok_or_else(|| EncryptionError::MissingKey {
                wanted: id.to_owned(),
                available: self.ids(),
            })
    }
}

impl PartialEq for Key {
    /// Keys with the same id: the same key (the id is a 64-bit digest).
    fn eq(&self, other: &Key) -> bool {
        self.id == other.id
    }
}

impl Eq for Key {}

/// The key in the file at `path` (a Secret entry mounted as a file).
pub fn read_key_file(path: &std::path::Path) -> Result<Key, EncryptionError> {
    let material = Zeroizing::new(std::fs::read(path).map_err(|e| {
        EncryptionError::BadKey(format!("reading the key file {}: {e}", path.display()))
    })?);
    Key::parse(&material)
        .map_err(|e| EncryptionError::BadKey(format!("the key file {}: {e}", path.display())))
}

/// Every key in the directory `dir` (a Secret mounted as a volume: one
/// file per entry; the volume's own hidden entries are skipped).
pub fn read_key_dir(dir: &std::path::Path) -> Result<Keyring, EncryptionError> {
    let unreadable =
        |e: std::io::Error| EncryptionError::BadKey(format!("reading {}: {e}", dir.display()));
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(unreadable)? {
        let entry = entry.map_err(unreadable)?;
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        paths.push(entry.path());
    }
    paths.sort();
    let keys = paths
        .iter()
        .map(|p| read_key_file(p))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Keyring::new(keys))
}

impl From<Key> for Keyring {
    fn from(key: Key) -> Keyring {
        Keyring { keys: vec![key] }
    }
}

/// What the header of an encrypted object says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Header {
    pub algorithm: String,
    pub key_id: String,
    /// Hex of the per-object salt.
    pub salt: String,
    pub record_bytes: usize,
}

/// The nonce of record `counter`: 7 zero bytes (each object has its own
/// key), the counter, and whether it is the last record.
fn nonce(counter: u32, last: bool) -> Nonce {
    let mut bytes = [0u8; NONCE_LEN];
    bytes[7..11].copy_from_slice(&counter.to_be_bytes());
    bytes[11] = u8::from(last);
    Nonce::assume_unique_for_key(bytes)
}

/// Encrypts one object, fed in pieces.
pub struct Sealer {
    key: LessSafeKey,
    aad: Vec<u8>,
    counter: u32,
    pending: Vec<u8>,
    out: Vec<u8>,
}

impl Sealer {
    /// Starts an object under `key`; the header is the first output.
    pub fn new(key: &Key) -> Result<Sealer, EncryptionError> {
        let mut salt = [0u8; SALT_LEN];
        SystemRandom::new()
            .fill(&mut salt)
            .map_err(|_| EncryptionError::Random)?;
        let header = Header {
            algorithm: ALGORITHM.to_owned(),
            key_id: key.id.clone(),
            salt: hex::encode(salt),
            record_bytes: RECORD_BYTES,
        };
        let json =
            serde_json::to_vec(&header).map_err(|e| EncryptionError::BadHeader(e.to_string()))?;
        let mut aad = Vec::with_capacity(MAGIC.len() + 4 + json.len());
        aad.extend_from_slice(MAGIC);
        aad.extend_from_slice(&(json.len() as u32).to_be_bytes());
        aad.extend_from_slice(&json);
        Ok(Sealer {
            key: key.object_key(&salt)?,
            out: aad.clone(),
            aad,
            counter: 0,
            pending: Vec::with_capacity(RECORD_BYTES + TAG_LEN),
        })
    }

    /// Takes `data`; whole records are sealed as they fill.
    pub fn update(&mut self, mut data: &[u8]) -> Result<(), EncryptionError> {
        while !data.is_empty() {
            let room = RECORD_BYTES - self.pending.len();
            let (now, rest) = data.split_at(room.min(data.len()));
            self.pending.extend_from_slice(now);
            data = rest;
            // A full record is sealed only once more data follows: the
            // last record must be sealed as the last.
            if self.pending.len() == RECORD_BYTES && !data.is_empty() {
                self.seal(false)?;
            }
        }
        Ok(())
    }

    /// The sealed bytes so far (taken: the next call returns only newer ones).
    pub fn take_output(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }

    /// Seals the last record and returns everything not yet taken.
    pub fn finish(mut self) -> Result<Vec<u8>, EncryptionError> {
        self.seal(true)?;
        Ok(self.out)
    }

    fn seal(&mut self, last: bool) -> Result<(), EncryptionError> {
        let mut record = std::mem::replace(
            &mut self.pending,
            Vec::with_capacity(RECORD_BYTES + TAG_LEN),
        );
        self.key
            .seal_in_place_append_tag(
                nonce(self.counter, last),
                Aad::from(&self.aad[..]),
                &mut record,
            )
            .map_err(|_| EncryptionError::TooLong)?;
        self.counter = self
            .counter
            .checked_add(1)
            .ok_or(EncryptionError::TooLong)?;
        self.out.extend_from_slice(&record);
        Ok(())
    }
}

/// Decrypts one object, fed in pieces.
pub struct Opener {
    keys: Keyring,
    state: OpenerState,
}

enum OpenerState {
    Header(Vec<u8>),
    Body(Box<Body>),
}

struct Body {
    key: LessSafeKey,
    key_id: String,
    aad: Vec<u8>,
    record_len: usize,
    counter: u32,
    buffer: Vec<u8>,
}

impl Opener {
    pub fn new(keys: Keyring) -> Opener {
        Opener {
            keys,
            state: OpenerState::Header(Vec::new()),
        }
    }

    /// The header, once enough bytes were fed to read it.
    pub fn key_id(&self) -> Option<&str> {
        match &self.state {
            OpenerState::Body(body) => Some(&body.key_id),
            OpenerState::Header(_) => None,
        }
    }

    /// Takes `data` and appends what it can already decrypt to `out`.
    /// Fails at the header when no key of the keyring sealed the object.
    pub fn update(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<(), EncryptionError> {
        match &mut self.state {
            OpenerState::Header(seen) => {
                seen.extend_from_slice(data);
                let Some(body) = self.read_header()? else {
                    return Ok(());
                };
                self.state = OpenerState::Body(body);
                // What came after the header is in the body's buffer now.
                self.drain(out, false)
            }
            OpenerState::Body(body) => {
                body.buffer.extend_from_slice(data);
                self.drain(out, false)
            }
        }
    }

    /// Decrypts the last record; fails if the object was cut short.
    pub fn finish(mut self, out: &mut Vec<u8>) -> Result<(), EncryptionError> {
        if let OpenerState::Header(seen) = &self.state {
            return Err(EncryptionError::NotEncrypted(format!(
                "it ends after {} bytes, inside the header",
                seen.len()
            )));
        }
        self.drain(out, true)
    }

    fn read_header(&self) -> Result<Option<Box<Body>>, EncryptionError> {
        let OpenerState::Header(seen) = &self.state else {
            return Ok(None);
        };
        let prefix = MAGIC.len() + 4;
        let magic_seen = &seen[..seen.len().min(MAGIC.len())];
        if magic_seen != &MAGIC[..magic_seen.len()] {
            return Err(EncryptionError::NotEncrypted(
                "it does not begin with dkv's encryption header".to_owned(),
            ));
        }
        if seen.len() < prefix {
            return Ok(None);
        }
        let mut len = [0u8; 4];
        len.copy_from_slice(&seen[MAGIC.len()..prefix]);
        let len = u32::from_be_bytes(len) as usize;
        if len > MAX_HEADER_LEN {
            return Err(EncryptionError::BadHeader(format!(
                "{len} bytes long, at most {MAX_HEADER_LEN}"
            )));
        }
        if seen.len() < prefix + len {
            return Ok(None);
        }
        let header: Header = serde_json::from_slice(&seen[prefix..prefix + len])
            .map_err(|e| EncryptionError::BadHeader(e.to_string()))?;
        if header.algorithm != ALGORITHM {
            return Err(EncryptionError::BadHeader(format!(
                "algorithm {:?}, this version knows only {ALGORITHM}",
                header.algorithm
            )));
        }
        if header.record_bytes == 0 || header.record_bytes > 16 * RECORD_BYTES {
            return Err(EncryptionError::BadHeader(format!(
                "records of {} bytes",
                header.record_bytes
            )));
        }
        let salt = hex::decode(&header.salt)
            .ok()
            .filter(|s| s.len() == SALT_LEN)
            .ok_or_else(|| EncryptionError::BadHeader("the salt is not 32 bytes".to_owned()))?;
        let key = self.keys.find(&header.key_id)?;
        Ok(Some(Box::new(Body {
            key: key.object_key(&salt)?,
            key_id: header.key_id,
            aad: seen[..prefix + len].to_vec(),
            record_len: header.record_bytes + TAG_LEN,
            counter: 0,
            buffer: seen[prefix + len..].to_vec(),
        })))
    }

    fn drain(&mut self, out: &mut Vec<u8>, at_end: bool) -> Result<(), EncryptionError> {
        let OpenerState::Body(body) = &mut self.state else {
            return Ok(());
        };
        // A record is opened as not-last only when more bytes follow it.
        let mut start = 0;
        while body.buffer.len() - start > body.record_len {
            let end = start + body.record_len;
            body.open(start, end, false, out)?;
            start = end;
        }
        if at_end {
            let end = body.buffer.len();
            if end - start < TAG_LEN {
                return Err(EncryptionError::Tampered {
                    record: u64::from(body.counter),
                    key_id: body.key_id.clone(),
                });
            }
            body.open(start, end, true, out)?;
            start = end;
        }
        body.buffer.drain(..start);
        Ok(())
    }
}

impl Body {
    fn open(
        &mut self,
        start: usize,
        end: usize,
        last: bool,
        out: &mut Vec<u8>,
    ) -> Result<(), EncryptionError> {
        let tampered = || EncryptionError::Tampered {
            record: u64::from(self.counter),
            key_id: self.key_id.clone(),
        };
        let mut record = self.buffer[start..end].to_vec();
        let plain = self
            .key
            .open_in_place(
                nonce(self.counter, last),
                Aad::from(&self.aad[..]),
                &mut record,
            )
            .map_err(|_| tampered())?;
        out.extend_from_slice(plain);
        self.counter = self.counter.checked_add(1).ok_or_else(tampered)?;
        Ok(())
    }
}

/// Whether `bytes` begin like an encrypted object.
pub fn is_encrypted(bytes: &[u8]) -> bool {
    bytes.len() >= MAGIC.len() && &bytes[..MAGIC.len()] == MAGIC
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(fill: u8) -> Key {
        Key::parse(&[fill; 32]).unwrap()
    }

    fn seal(key: &Key, data: &[u8], pieces: usize) -> Vec<u8> {
        let mut sealer = Sealer::new(key).unwrap();
        let mut out = sealer.take_output();
        for piece in data.chunks(pieces.max(1)) {
            sealer.update(piece).unwrap();
            out.extend(sealer.take_output());
        }
        out.extend(sealer.finish().unwrap());
        out
    }

    fn open(keys: &Keyring, data: &[u8], pieces: usize) -> Result<Vec<u8>, EncryptionError> {
        let mut opener = Opener::new(keys.clone());
        let mut out = Vec::new();
        for piece in data.chunks(pieces.max(1)) {
            opener.update(piece, &mut out)?;
        }
        opener.finish(&mut out)?;
        Ok(out)
    }

    #[test]
    fn keys_parse_from_raw_hex_and_base64_with_the_same_id() {
        let raw = [7u8; 32];
        let hex_form = format!("{}\n", hex::encode(raw));
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD.encode(raw);
        let ids: Vec<String> = [&raw[..], hex_form.as_bytes(), b64.as_bytes()]
            .iter()
            .map(|m| Key::parse(m).unwrap().id().to_owned())
            .collect();
        assert_eq!(ids[0].len(), 16);
        assert!(ids.iter().all(|id| id == &ids[0]), "{ids:?}");
        assert_ne!(key(1).id(), key(2).id());
        let err = Key::parse(b"too short").unwrap_err();
        assert!(err.to_string().contains("32 bytes"), "{err}");
        assert!(!format!("{:?}", key(7)).contains("7, 7"));
    }

    #[test]
    fn content_of_any_length_round_trips_in_any_pieces() {
        let k = key(3);
        let keys = Keyring::from(k.clone());
        for len in [
            0,
            1,
            RECORD_BYTES - 1,
            RECORD_BYTES,
            RECORD_BYTES + 1,
            3 * RECORD_BYTES,
        ] {
            let data: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            for pieces in [1000, 70_000] {
                let sealed = seal(&k, &data, pieces);
                assert!(is_encrypted(&sealed));
                assert_eq!(open(&keys, &sealed, 777).unwrap(), data, "len {len}");
                assert_eq!(open(&keys, &sealed, 100_000).unwrap(), data);
            }
        }
    }

    #[test]
    fn the_same_content_twice_is_sealed_differently() {
        let k = key(3);
        assert_ne!(seal(&k, b"same", 10), seal(&k, b"same", 10));
    }

    #[test]
    fn a_wrong_or_missing_key_is_named_and_nothing_decrypts() {
        let sealed = seal(&key(1), b"secret data", 100);
        let err = open(&Keyring::from(key(2)), &sealed, 100).unwrap_err();
        assert!(
            matches!(&err, EncryptionError::MissingKey { wanted, available } if wanted == key(1).id() && available == &vec![key(2).id().to_owned()]),
            "{err}"
        );
        assert!(err.to_string().contains(key(1).id()), "{err}");
        let err = open(&Keyring::default(), &sealed, 100).unwrap_err();
        assert!(err.to_string().contains("keySecret"), "{err}");
        // Several keys (a rotation): the right one is picked by its id.
        let ring = Keyring::new([key(2), key(1)]);
        assert_eq!(open(&ring, &sealed, 5).unwrap(), b"secret data");
    }

    #[test]
    fn flipped_dropped_or_cut_records_fail_to_decrypt() {
        let k = key(9);
        let keys = Keyring::from(k.clone());
        let data: Vec<u8> = (0..3 * RECORD_BYTES + 5).map(|i| i as u8).collect();
        let sealed = seal(&k, &data, 50_000);
        let header_len = sealed.len() - (data.len() + 4 * TAG_LEN);

        let mut flipped = sealed.clone();
        flipped[header_len + RECORD_BYTES + 100] ^= 1;
        assert!(matches!(
            open(&keys, &flipped, 4096),
            Err(EncryptionError::Tampered { record: 1, .. })
        ));

        // Cut at a record boundary: the new last record was not sealed as last.
        let cut = &sealed[..header_len + 2 * (RECORD_BYTES + TAG_LEN)];
        assert!(matches!(
            open(&keys, cut, 4096),
            Err(EncryptionError::Tampered { .. })
        ));

        // A record dropped from the middle.
        let mut dropped = sealed[..header_len + RECORD_BYTES + TAG_LEN].to_vec();
        dropped.extend_from_slice(&sealed[header_len + 2 * (RECORD_BYTES + TAG_LEN)..]);
        assert!(open(&keys, &dropped, 4096).is_err());

        // An altered header (another record size) breaks every record.
        let text = String::from_utf8_lossy(&sealed[..header_len]).replace("65536", "65535");
        let mut altered = text.into_bytes();
        altered.extend_from_slice(&sealed[header_len..]);
        assert!(open(&keys, &altered, 4096).is_err());

        assert!(matches!(
            open(&keys, b"plain etcd snapshot", 4),
            Err(EncryptionError::NotEncrypted(_))
        ));
    }
}
