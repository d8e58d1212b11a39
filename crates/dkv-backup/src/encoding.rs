//! How backup objects are stored: compressed with zstd (by default) and,
//! when the user gives a key, encrypted ([`crate::encryption`]) after
//! compression.
//!
//! Reading needs no record of how an object was written: an encrypted
//! object begins with [`crate::encryption::MAGIC`], a compressed one with
//! zstd's frame magic, and an etcd snapshot (a bbolt file) with neither, so
//! a snapshot written by an older dkv, or by hand, still restores. Both
//! directions are push-based and keep memory bounded.

use std::io::Write as _;

use crate::encryption::{self, EncryptionError, Key, Keyring, Opener, Sealer};

/// zstd's frame magic number, as stored.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];

/// zstd's fastest standard level. A backup's compression runs beside etcd
/// serving the snapshot, so on two cores it is what a backup of
/// compressible data waits for: on the benchmark's JSON documents level 1
/// compresses about 1.7x faster than zstd's default (3), 775 against
/// 454 MB/s on one core of the benchmark machine, to a ratio as good (5.5x
/// against 4.8x; `zstd -b1 -e3`). Higher levels gain a few percent of size
/// at several times the CPU.
const ZSTD_LEVEL: i32 = 1;

/// The share of its size that compression must save on the start of a
/// snapshot for the whole snapshot to be compressed
/// ([`Encoding::for_sample`]). etcd's pages of text, JSON or protobuf save
/// well over half.
pub const WORTHWHILE_SAVING: f64 = 0.05;

/// A writer that keeps only the number of bytes written to it.
struct ByteCount(u64);

impl std::io::Write for ByteCount {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// How to write an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Encoding {
    pub compress: bool,
    pub key: Option<Key>,
}

impl Default for Encoding {
    /// Compressed, not encrypted.
    fn default() -> Self {
        Encoding {
            compress: true,
            key: None,
        }
    }
}

impl Encoding {
    /// As etcd produced it: what dkv wrote before compression existed.
    pub fn plain() -> Encoding {
        Encoding {
            compress: false,
            key: None,
        }
    }

    /// What the object's name ends with after its own extension: `.zst`
    /// when compressed, then `.enc` when encrypted.
    pub fn suffix(&self) -> &'static str {
        match (self.compress, self.key.is_some()) {
            (false, false) => "",
            (true, false) => ".zst",
            (false, true) => ".enc",
            (true, true) => ".zst.enc",
        }
    }

    /// `Some("zstd")` when compressed: the artifact record's `compression`.
    pub fn compression(&self) -> Option<&'static str> {
        self.compress.then_some("zstd")
    }

    /// This encoding, without compression when the `sample` (the start of
    /// the object, in pieces) shows it not worth its CPU time: zstd at the
    /// level it would use saves less than [`WORTHWHILE_SAVING`] of it.
    /// Values stored already compressed or encrypted do not shrink, and
    /// compressing them would only slow the backup down. An empty sample
    /// keeps the encoding.
    pub fn for_sample<B: AsRef<[u8]>>(&self, sample: &[B]) -> Encoding {
        let size: usize = sample.iter().map(|piece| piece.as_ref().len()).sum();
        if !self.compress || size == 0 {
            return self.clone();
        }
        let compressed = (|| -> std::io::Result<u64> {
            let mut zstd = zstd::stream::write::Encoder::new(ByteCount(0), ZSTD_LEVEL)?;
            for piece in sample {
                zstd.write_all(piece.as_ref())?;
            }
            Ok(zstd.finish()?.0)
        })();
        // Unmeasurable: compress, as asked.
        let saves = compressed.map_or(1.0, |bytes| 1.0 - bytes as f64 / size as f64);
        Encoding {
            compress: saves >= WORTHWHILE_SAVING,
            key: self.key.clone(),
        }
    }

    /// The id of the key that encrypts, if any.
    pub fn key_id(&self) -> Option<&str> {
        self.key.as_ref().map(Key::id)
    }

    pub fn encoder(&self) -> Result<Encoder, CodecError> {
        let zstd = if self.compress {
            let mut zstd = zstd::stream::write::Encoder::new(Vec::new(), ZSTD_LEVEL)?;
            // A checksum of the content in the frame: damage is found even
            // where no sha256 was recorded.
            zstd.include_checksum(true)?;
            Some(zstd)
        } else {
            None
        };
        let sealer = self.key.as_ref().map(Sealer::new).transpose()?;
        Ok(Encoder { zstd, sealer })
    }

    /// `content` encoded whole.
    pub fn encode_all(&self, content: &[u8]) -> Result<Vec<u8>, CodecError> {
        let mut encoder = self.encoder()?;
        let mut out = encoder.update(content)?;
        out.extend(encoder.finish()?);
        Ok(out)
    }
}

/// Why an object could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error(transparent)]
    Encryption(#[from] EncryptionError),
    #[error("zstd: {0}")]
    Zstd(#[from] std::io::Error),
}

/// Encodes one object, fed in pieces.
pub struct Encoder {
    zstd: Option<zstd::stream::write::Encoder<'static, Vec<u8>>>,
    sealer: Option<Sealer>,
}

impl Encoder {
    /// Takes `data`; returns the encoded bytes ready so far (often none:
    /// zstd keeps a window).
    pub fn update(&mut self, data: &[u8]) -> Result<Vec<u8>, CodecError> {
        let compressed = match &mut self.zstd {
            Some(zstd) => {
                zstd.write_all(data)?;
                std::mem::take(zstd.get_mut())
            }
            None => data.to_vec(),
        };
        self.seal(compressed)
    }

    /// Ends the object; returns the last bytes.
    pub fn finish(mut self) -> Result<Vec<u8>, CodecError> {
        let rest = match self.zstd.take() {
            Some(zstd) => zstd.finish()?,
            None => Vec::new(),
        };
        match self.sealer.take() {
            Some(mut sealer) => {
                sealer.update(&rest)?;
                Ok(sealer.finish()?)
            }
            None => Ok(rest),
        }
    }

    fn seal(&mut self, bytes: Vec<u8>) -> Result<Vec<u8>, CodecError> {
        match &mut self.sealer {
            Some(sealer) => {
                sealer.update(&bytes)?;
                Ok(sealer.take_output())
            }
            None => Ok(bytes),
        }
    }
}

/// A layer of the decoder that is chosen by the first bytes through it.
enum Layer<T> {
    Undecided(Vec<u8>),
    Absent,
    Present(T),
}

/// The most content [`Decoder::update`] hands out at once, however well
/// the object compressed: a run of zeros shrinks to almost nothing, and
/// decoding it must not need memory of its size.
pub const DECODED_PIECE: usize = 1 << 20;

/// zstd's decoder with the frame it is in.
struct Inflater {
    zstd: zstd::stream::raw::Decoder<'static>,
    /// zstd's last hint: 0 once a frame has ended and been handed out.
    hint: usize,
    /// Where zstd writes, handed out a piece at a time.
    piece: Vec<u8>,
}

/// Decodes one object, whatever way it was written, fed in pieces.
pub struct Decoder {
    keys: Keyring,
    decrypt: Layer<Opener>,
    decompress: Layer<Inflater>,
    encrypted_with: Option<String>,
    compressed: bool,
}

impl Decoder {
    /// `keys` decrypt an encrypted object (an empty keyring is fine for
    /// the others).
    pub fn new(keys: Keyring) -> Decoder {
        Decoder {
            keys,
            decrypt: Layer::Undecided(Vec::new()),
            decompress: Layer::Undecided(Vec::new()),
            encrypted_with: None,
            compressed: false,
        }
    }

    /// The id of the key the object was encrypted with, once known.
    pub fn encrypted_with(&self) -> Option<&str> {
        self.encrypted_with.as_deref()
    }

    /// Whether the object was compressed, once known.
    pub fn compressed(&self) -> bool {
        self.compressed
    }

    /// Whether the object is stored as its content (neither encrypted nor
    /// compressed): `None` until its first bytes tell. While it is,
    /// [`Decoder::update`] hands out what it is given.
    pub fn is_plain(&self) -> Option<bool> {
        match (&self.decrypt, &self.decompress) {
            (Layer::Present(_), _) | (_, Layer::Present(_)) => Some(false),
            (Layer::Absent, Layer::Absent) => {
                Some(!self.compressed && self.encrypted_with.is_none())
            }
            _ => None,
        }
    }

    /// Takes stored bytes and hands the content decoded from them to
    /// `content`, in pieces of at most [`DECODED_PIECE`] bytes (a plain
    /// object's bytes go through whole, not copied). `content`'s failure
    /// stops the decoding and is returned.
    pub fn update<E: From<CodecError>>(
        &mut self,
        data: &[u8],
        content: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut content = content;
        if let (Layer::Absent, Layer::Absent) = (&self.decrypt, &self.decompress) {
            return content(data);
        }
        let decrypted = self.decrypt_layer(data, false)?;
        self.decompress_layer(&decrypted, false, &mut content)
    }

    /// Ends the object: the last of the content, to `content`. Fails when
    /// the object is cut short (encrypted ones) or not a whole zstd frame.
    pub fn finish<E: From<CodecError>>(
        &mut self,
        content: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut content = content;
        let decrypted = self.decrypt_layer(&[], true)?;
        self.decompress_layer(&decrypted, true, &mut content)
    }

    fn decrypt_layer(&mut self, data: &[u8], at_end: bool) -> Result<Vec<u8>, CodecError> {
        let mut out = Vec::new();
        if let Layer::Undecided(head) = &mut self.decrypt {
            head.extend_from_slice(data);
            if head.len() < encryption::MAGIC.len() && !at_end {
                return Ok(out);
            }
            let head = std::mem::take(head);
            if encryption::is_encrypted(&head) {
                let mut opener = Opener::new(self.keys.clone());
                opener.update(&head, &mut out)?;
                self.encrypted_with = opener.key_id().map(str::to_owned);
                self.decrypt = Layer::Present(opener);
            } else {
                self.decrypt = Layer::Absent;
                out = head;
            }
        } else {
            match &mut self.decrypt {
                Layer::Present(opener) => {
                    opener.update(data, &mut out)?;
                    if self.encrypted_with.is_none() {
                        self.encrypted_with = opener.key_id().map(str::to_owned);
                    }
                }
                _ => out.extend_from_slice(data),
            }
        }
        if at_end
            && let Layer::Present(opener) = std::mem::replace(&mut self.decrypt, Layer::Absent)
        {
            opener.finish(&mut out)?;
        }
        Ok(out)
    }

    fn decompress_layer<E: From<CodecError>>(
        &mut self,
        data: &[u8],
        at_end: bool,
        content: &mut impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let head;
        let data = if let Layer::Undecided(pending) = &mut self.decompress {
            pending.extend_from_slice(data);
            if pending.len() < ZSTD_MAGIC.len() && !at_end {
                return Ok(());
            }
            head = std::mem::take(pending);
            if head.starts_with(&ZSTD_MAGIC) {
                self.decompress = Layer::Present(Inflater {
                    zstd: zstd::stream::raw::Decoder::new().map_err(CodecError::from)?,
                    hint: 1,
                    piece: vec![0; DECODED_PIECE],
                });
                self.compressed = true;
            } else {
                self.decompress = Layer::Absent;
            }
            &head[..]
        } else {
            data
        };
        let Layer::Present(inflater) = &mut self.decompress else {
            return if data.is_empty() {
                Ok(())
            } else {
                content(data)
            };
        };
        inflater.inflate(data, content)?;
        if at_end {
            if inflater.hint != 0 {
                return Err(CodecError::from(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the zstd frame is cut short",
                ))
                .into());
            }
            self.decompress = Layer::Absent;
        }
        Ok(())
    }
}

impl Inflater {
    /// Decodes `data` whole, handing the content out as zstd's buffer
    /// fills.
    fn inflate<E: From<CodecError>>(
        &mut self,
        data: &[u8],
        content: &mut impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        use zstd::stream::raw::{InBuffer, Operation as _, OutBuffer};
        let mut input = InBuffer::around(data);
        loop {
            let mut output = OutBuffer::around(&mut self.piece[..]);
            let taken = input.pos();
            let hint = self
                .zstd
                .run(&mut input, &mut output)
                .map_err(CodecError::from)?;
            let produced = output.pos();
            // A step that moved nothing says nothing of the frame (after
            // its end, zstd asks for the next frame's header).
            if produced > 0 || input.pos() > taken {
                self.hint = hint;
            }
            if produced > 0 {
                content(&self.piece[..produced])?;
            }
            // All taken, and zstd holds nothing more (its output had room).
            if input.pos() == data.len() && produced < self.piece.len() {
                return Ok(());
            }
        }
    }
}

/// `stored` decoded whole with `keys`.
pub fn decode_all(keys: &Keyring, stored: &[u8]) -> Result<Vec<u8>, CodecError> {
    let mut decoder = Decoder::new(keys.clone());
    let mut out = Vec::new();
    let mut append = |piece: &[u8]| {
        out.extend_from_slice(piece);
        Ok::<(), CodecError>(())
    };
    decoder.update(stored, &mut append)?;
    decoder.finish(&mut append)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(fill: u8) -> Key {
        Key::parse(&[fill; 32]).unwrap()
    }

    fn encode(encoding: &Encoding, data: &[u8], piece: usize) -> Vec<u8> {
        let mut encoder = encoding.encoder().unwrap();
        let mut out = Vec::new();
        for chunk in data.chunks(piece) {
            out.extend(encoder.update(chunk).unwrap());
        }
        out.extend(encoder.finish().unwrap());
        out
    }

    /// The content, whether it was compressed, and the key id it was
    /// encrypted with.
    fn decode(
        keys: &Keyring,
        stored: &[u8],
        piece: usize,
    ) -> Result<(Vec<u8>, bool, Option<String>), CodecError> {
        let mut decoder = Decoder::new(keys.clone());
        let mut out = Vec::new();
        let mut largest = 0;
        let mut append = |content: &[u8]| {
            largest = largest.max(content.len());
            out.extend_from_slice(content);
            Ok::<(), CodecError>(())
        };
        for chunk in stored.chunks(piece) {
            decoder.update(chunk, &mut append)?;
        }
        decoder.finish(&mut append)?;
        assert!(largest <= DECODED_PIECE.max(piece), "{largest}");
        let key_id = decoder.encrypted_with().map(str::to_owned);
        Ok((out, decoder.compressed(), key_id))
    }

    #[test]
    fn every_encoding_round_trips_and_is_recognised_without_being_told() {
        // Pages that compress like etcd's: repetitive with some noise.
        let data: Vec<u8> = (0..300_000u32)
            .map(|i| if i % 97 == 0 { (i % 251) as u8 } else { b'k' })
            .collect();
        let keys = Keyring::from(key(5));
        for encoding in [
            Encoding::plain(),
            Encoding::default(),
            Encoding {
                compress: true,
                key: Some(key(5)),
            },
            Encoding {
                compress: false,
                key: Some(key(5)),
            },
        ] {
            let stored = encode(&encoding, &data, 4096);
            if encoding.compress {
                assert!(stored.len() < data.len() / 5, "{}", stored.len());
            }
            for piece in [1, 3, 10_000, 1 << 20] {
                if piece == 1 && stored.len() > 100_000 {
                    continue;
                }
                let (back, compressed, key_id) = decode(&keys, &stored, piece).unwrap();
                assert_eq!(back, data, "{:?} in pieces of {piece}", encoding.suffix());
                assert_eq!(compressed, encoding.compress);
                assert_eq!(key_id.as_deref(), encoding.key_id());
            }
        }
        assert_eq!(decode_all(&keys, b"").unwrap(), b"");
        assert_eq!(decode_all(&keys, b"abc").unwrap(), b"abc");
    }

    #[test]
    fn content_that_compressed_to_almost_nothing_is_handed_out_in_bounded_pieces() {
        // 64 MiB of zeros compress to a few KiB; one update must not
        // decode them into one buffer.
        let zeros = vec![0u8; 64 << 20];
        let stored = Encoding::default().encode_all(&zeros).unwrap();
        assert!(stored.len() < 64 << 10, "{}", stored.len());
        let mut decoder = Decoder::new(Keyring::default());
        let (mut total, mut largest, mut calls) = (0usize, 0usize, 0usize);
        let mut count = |content: &[u8]| {
            assert!(content.iter().all(|&b| b == 0));
            total += content.len();
            largest = largest.max(content.len());
            calls += 1;
            Ok::<(), CodecError>(())
        };
        decoder.update(&stored, &mut count).unwrap();
        decoder.finish(&mut count).unwrap();
        assert_eq!(total, zeros.len());
        assert_eq!(largest, DECODED_PIECE);
        assert!(calls >= 64, "{calls}");
        // A frame cut short is refused when the object ends.
        let mut decoder = Decoder::new(Keyring::default());
        let ignore = |_: &[u8]| Ok::<(), CodecError>(());
        decoder.update(&stored[..stored.len() - 3], ignore).unwrap();
        assert!(decoder.finish(ignore).is_err());
    }

    #[test]
    fn whether_an_object_is_plain_is_known_from_its_first_bytes() {
        let keys = Keyring::from(key(5));
        let data = b"etcd pages ".repeat(100);
        for (encoding, plain) in [
            (Encoding::plain(), true),
            (Encoding::default(), false),
            (
                Encoding {
                    compress: false,
                    key: Some(key(5)),
                },
                false,
            ),
        ] {
            let stored = encode(&encoding, &data, 4096);
            let mut decoder = Decoder::new(keys.clone());
            let ignore = |_: &[u8]| Ok::<(), CodecError>(());
            assert_eq!(decoder.is_plain(), None);
            decoder.update(&stored[..2], ignore).unwrap();
            assert_eq!(decoder.is_plain(), None, "{encoding:?}");
            decoder.update(&stored[2..16], ignore).unwrap();
            assert_eq!(decoder.is_plain(), Some(plain), "{encoding:?}");
        }
        // An object too short to tell is plain once it ends.
        let mut decoder = Decoder::new(keys);
        let mut out = Vec::new();
        let mut append = |content: &[u8]| {
            out.extend_from_slice(content);
            Ok::<(), CodecError>(())
        };
        decoder.update(b"ab", &mut append).unwrap();
        decoder.finish(&mut append).unwrap();
        assert_eq!(out, b"ab");
        assert_eq!(decoder.is_plain(), Some(true));
    }

    #[test]
    fn suffixes_and_record_fields_follow_the_encoding() {
        let encrypted = Encoding {
            compress: true,
            key: Some(key(1)),
        };
        assert_eq!(Encoding::plain().suffix(), "");
        assert_eq!(Encoding::default().suffix(), ".zst");
        assert_eq!(encrypted.suffix(), ".zst.enc");
        assert_eq!(encrypted.compression(), Some("zstd"));
        assert_eq!(encrypted.key_id(), Some(key(1).id()));
    }

    #[test]
    fn without_the_key_nothing_is_decoded() {
        let stored = Encoding {
            compress: true,
            key: Some(key(1)),
        }
        .encode_all(b"secret")
        .unwrap();
        let err = decode_all(&Keyring::from(key(2)), &stored).unwrap_err();
        assert!(
            matches!(
                err,
                CodecError::Encryption(EncryptionError::MissingKey { .. })
            ),
            "{err}"
        );
    }

    #[test]
    fn a_start_that_does_not_compress_turns_compression_off_and_nothing_else() {
        let noise = crate::testing::incompressible(7, 1 << 20);
        let pieces: Vec<&[u8]> = noise.chunks(64 * 1024).collect();
        assert_eq!(Encoding::default().for_sample(&pieces), Encoding::plain());
        let sealed = Encoding {
            compress: true,
            key: Some(key(1)),
        };
        assert_eq!(
            sealed.for_sample(&pieces),
            Encoding {
                compress: false,
                key: Some(key(1)),
            }
        );
        // What compresses stays compressed; what was not asked stays off.
        let text = b"{\"id\": 1, \"kind\": \"order\", \"amount\": 12}\n".repeat(20_000);
        assert_eq!(
            Encoding::default().for_sample(&[&text[..]]),
            Encoding::default()
        );
        assert_eq!(
            Encoding::plain().for_sample(&[&text[..]]),
            Encoding::plain()
        );
        // Nothing to judge by: as asked.
        let empty: [&[u8]; 0] = [];
        assert_eq!(Encoding::default().for_sample(&empty), Encoding::default());
    }
}
