//! SPDY/3.1 framing, the wire format of Kubernetes' streaming subresources (the `portforward.k8s.io` protocol that
//! kubectl speaks through Go's spdystream, plain after an `Upgrade: SPDY/3.1` or tunnelled in WebSocket binary
//! messages).
//!
//! What is here, after the SPDY draft 3.1 specification:
//! * frames: an 8-byte header, then the payload. A control frame starts with the control bit, the version (3) and a
//!   16-bit type, a data frame with a 31-bit stream id; both then carry 8 bits of flags and a 24-bit length;
//! * [`FrameDecoder`] cuts a byte stream (arriving in pieces of any size) into [`Frame`]s, [`Frame::encode`] writes
//!   one;
//! * header blocks (SYN_STREAM, SYN_REPLY, HEADERS): a 32-bit count of name/value pairs, each name and value
//!   prefixed with its 32-bit length, compressed with zlib against the predefined SPDY/3 dictionary; one zlib
//!   stream per direction lives as long as the session, each block ending with a sync flush ([`HeaderCompressor`],
//!   [`HeaderDecompressor`]).
//!
//! A malformed frame is an [`SpdyError`] that ends the session; nothing here panics on what a peer sends.

use std::sync::LazyLock;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

/// The protocol version in every control frame.
pub const VERSION: u16 = 3;
/// FLAG_FIN on DATA, SYN_STREAM, SYN_REPLY and HEADERS: the sender sends nothing more on the stream.
pub const FLAG_FIN: u8 = 0x01;
/// The largest header block accepted once decompressed (the frame limit applies to the compressed form only).
const MAX_HEADER_BLOCK: usize = 1 << 20;

const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const SETTINGS: u16 = 4;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
const HEADERS: u16 = 8;
const WINDOW_UPDATE: u16 = 9;

/// RST_STREAM status codes used here (SPDY/3 section 2.6.3).
pub mod rst {
    /// The peer broke the protocol on this stream.
    pub const PROTOCOL_ERROR: u32 = 1;
}

/// A failure to read the peer's frames.
#[derive(Debug, thiserror::Error)]
pub enum SpdyError {
    #[error("SPDY frame: unsupported version {0} (only SPDY/3 is spoken)")]
    Version(u16),
    #[error("SPDY {frame} frame: payload of {len} bytes is too short")]
    Short { frame: &'static str, len: usize },
    #[error("SPDY header block: {0}")]
    HeaderBlock(String),
    #[error("SPDY header block: zlib: {0}")]
    Zlib(String),
}

/// Name/value pairs of a header block, names lower-case, values as sent (several values joined by NUL).
pub type Headers = Vec<(String, String)>;

/// One frame. Header blocks are kept compressed here: compression state is per session and per direction, so the
/// session (de)compresses them in order ([`HeaderCompressor`], [`HeaderDecompressor`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    Data {
        stream: u32,
        flags: u8,
        data: Bytes,
    },
    SynStream {
        stream: u32,
        associated: u32,
        priority: u8,
        flags: u8,
        block: Bytes,
    },
    SynReply {
        stream: u32,
        flags: u8,
        block: Bytes,
    },
    RstStream {
        stream: u32,
        status: u32,
    },
    /// (flags, id, value) triples.
    Settings {
        flags: u8,
        entries: Vec<(u8, u32, u32)>,
    },
    Ping {
        id: u32,
    },
    GoAway {
        last_good: u32,
        status: u32,
    },
    Headers {
        stream: u32,
        flags: u8,
        block: Bytes,
    },
    WindowUpdate {
        stream: u32,
        delta: u32,
    },
    /// A control frame of a type this module does not know, which SPDY says to ignore.
    Unknown {
        kind: u16,
    },
}

const STREAM_MASK: u32 = 0x7fff_ffff;

impl Frame {
    /// The frame on the wire.
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::new();
        match self {
            Frame::Data {
                stream,
                flags,
                data,
            } => {
                out.put_u32(stream & STREAM_MASK);
                put_flags_len(&mut out, *flags, data.len());
                out.put_slice(data);
            }
            Frame::SynStream {
                stream,
                associated,
                priority,
                flags,
                block,
            } => {
                control(&mut out, SYN_STREAM, *flags, 10 + block.len());
                out.put_u32(stream & STREAM_MASK);
                out.put_u32(associated & STREAM_MASK);
                out.put_u8((priority & 0x07) << 5);
                out.put_u8(0); // slot
                out.put_slice(block);
            }
            Frame::SynReply {
                stream,
                flags,
                block,
            } => {
                control(&mut out, SYN_REPLY, *flags, 4 + block.len());
                out.put_u32(stream & STREAM_MASK);
                out.put_slice(block);
            }
            Frame::RstStream { stream, status } => {
                control(&mut out, RST_STREAM, 0, 8);
                out.put_u32(stream & STREAM_MASK);
                out.put_u32(*status);
            }
            Frame::Settings { flags, entries } => {
                control(&mut out, SETTINGS, *flags, 4 + 8 * entries.len());
                out.put_u32(entries.len() as u32);
                for (flag, id, value) in entries {
                    out.put_u32((u32::from(*flag) << 24) | (id & 0x00ff_ffff));
                    out.put_u32(*value);
                }
            }
            Frame::Ping { id } => {
                control(&mut out, PING, 0, 4);
                out.put_u32(*id);
            }
            Frame::GoAway { last_good, status } => {
                control(&mut out, GOAWAY, 0, 8);
                out.put_u32(last_good & STREAM_MASK);
                out.put_u32(*status);
            }
            Frame::Headers {
                stream,
                flags,
                block,
            } => {
                control(&mut out, HEADERS, *flags, 4 + block.len());
                out.put_u32(stream & STREAM_MASK);
                out.put_slice(block);
            }
            Frame::WindowUpdate { stream, delta } => {
                control(&mut out, WINDOW_UPDATE, 0, 8);
                out.put_u32(stream & STREAM_MASK);
                out.put_u32(delta & STREAM_MASK);
            }
            Frame::Unknown { kind } => control(&mut out, *kind, 0, 0),
        }
        out.freeze()
    }

    /// Parses one frame from its 8-byte header fields and payload.
    fn parse(head: [u8; 8], mut payload: Bytes) -> Result<Frame, SpdyError> {
        let flags = head[4];
        if head[0] & 0x80 == 0 {
            let stream = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) & STREAM_MASK;
            return Ok(Frame::Data {
                stream,
                flags,
                data: payload,
            });
        }
        let version = u16::from_be_bytes([head[0] & 0x7f, head[1]]);
        if version != VERSION {
            return Err(SpdyError::Version(version));
        }
        let kind = u16::from_be_bytes([head[2], head[3]]);
        let need = |frame: &'static str, n: usize, p: &Bytes| {
            if p.len() < n {
                Err(SpdyError::Short {
                    frame,
                    len: p.len(),
                })
            } else {
                Ok(())
            }
        };
        Ok(match kind {
            SYN_STREAM => {
                need("SYN_STREAM", 10, &payload)?;
                let stream = payload.get_u32() & STREAM_MASK;
                let associated = payload.get_u32() & STREAM_MASK;
                let priority = payload.get_u8() >> 5;
                let _slot = payload.get_u8();
                Frame::SynStream {
                    stream,
                    associated,
                    priority,
                    flags,
                    block: payload,
                }
            }
            SYN_REPLY => {
                need("SYN_REPLY", 4, &payload)?;
                Frame::SynReply {
                    stream: payload.get_u32() & STREAM_MASK,
                    flags,
                    block: payload,
                }
            }
            RST_STREAM => {
                need("RST_STREAM", 8, &payload)?;
                Frame::RstStream {
                    stream: payload.get_u32() & STREAM_MASK,
                    status: payload.get_u32(),
                }
            }
            SETTINGS => {
                need("SETTINGS", 4, &payload)?;
                let count = payload.get_u32() as usize;
                need("SETTINGS", count.saturating_mul(8), &payload)?;
                let entries = (0..count)
                    .map(|_| {
                        let word = payload.get_u32();
                        ((word >> 24) as u8, word & 0x00ff_ffff, payload.get_u32())
                    })
                    .collect();
                Frame::Settings { flags, entries }
            }
            PING => {
                need("PING", 4, &payload)?;
                Frame::Ping {
                    id: payload.get_u32(),
                }
            }
            GOAWAY => {
                need("GOAWAY", 4, &payload)?;
                let last_good = payload.get_u32() & STREAM_MASK;
                // SPDY/3 added the status; tolerate its absence.
                let status = if payload.len() >= 4 {
                    payload.get_u32()
                } else {
                    0
                };
                Frame::GoAway { last_good, status }
            }
            HEADERS => {
                need("HEADERS", 4, &payload)?;
                Frame::Headers {
                    stream: payload.get_u32() & STREAM_MASK,
                    flags,
                    block: payload,
                }
            }
            WINDOW_UPDATE => {
                need("WINDOW_UPDATE", 8, &payload)?;
                Frame::WindowUpdate {
                    stream: payload.get_u32() & STREAM_MASK,
                    delta: payload.get_u32() & STREAM_MASK,
                }
            }
            kind => Frame::Unknown { kind },
        })
    }
}

fn control(out: &mut BytesMut, kind: u16, flags: u8, len: usize) {
    out.put_u16(0x8000 | VERSION);
    out.put_u16(kind);
    put_flags_len(out, flags, len);
}

fn put_flags_len(out: &mut BytesMut, flags: u8, len: usize) {
    // Callers keep payloads under 16 MiB; the mask keeps a mistake from corrupting the flags.
    out.put_u32((u32::from(flags) << 24) | (len as u32 & 0x00ff_ffff));
}

/// Cuts a byte stream into frames, whatever the sizes of the pieces it arrives in.
#[derive(Default)]
pub struct FrameDecoder {
    buf: BytesMut,
}

impl FrameDecoder {
    /// Appends bytes received from the peer.
    pub fn extend(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete frame, `None` until enough bytes arrived.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, SpdyError> {
        if self.buf.len() < 8 {
            return Ok(None);
        }
        let mut head = [0u8; 8];
        head.copy_from_slice(&self.buf[..8]);
        let len = (u32::from_be_bytes([0, head[5], head[6], head[7]])) as usize;
        if self.buf.len() < 8 + len {
            self.buf.reserve(8 + len - self.buf.len());
            return Ok(None);
        }
        self.buf.advance(8);
        let payload = self.buf.split_to(len).freeze();
        Frame::parse(head, payload).map(Some)
    }
}

/// The predefined zlib dictionary of SPDY/3 header compression (draft 3, section 2.6.10.1): these names, each
/// preceded by its length as a 32-bit big-endian integer, then [`DICTIONARY_TAIL`] as is. 1,423 bytes.
const DICTIONARY_WORDS: [&str; 65] = [
    "options",
    "head",
    "post",
    "put",
    "delete",
    "trace",
    "accept",
    "accept-charset",
    "accept-encoding",
    "accept-language",
    "accept-ranges",
    "age",
    "allow",
    "authorization",
    "cache-control",
    "connection",
    "content-base",
    "content-encoding",
    "content-language",
    "content-length",
    "content-location",
    "content-md5",
    "content-range",
    "content-type",
    "date",
    "etag",
    "expect",
    "expires",
    "from",
    "host",
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "if-unmodified-since",
    "last-modified",
    "location",
    "max-forwards",
    "pragma",
    "proxy-authenticate",
    "proxy-authorization",
    "range",
    "referer",
    "retry-after",
    "server",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "user-agent",
    "vary",
    "via",
    "warning",
    "www-authenticate",
    "method",
    "get",
    "status",
    "200 OK",
    "version",
    "HTTP/1.1",
    "url",
    "public",
    "set-cookie",
    "keep-alive",
    "origin",
];

/// The dictionary's unprefixed end: status codes, reason phrases, dates and common values run together.
const DICTIONARY_TAIL: &str = concat!(
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505",
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized",
    "403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service Unavailable",
    "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT",
    "chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,",
    "text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.",
);

static DICTIONARY: LazyLock<Vec<u8>> = LazyLock::new(|| {
    let mut d = Vec::with_capacity(1423);
    for w in DICTIONARY_WORDS {
        d.extend_from_slice(&(w.len() as u32).to_be_bytes());
        d.extend_from_slice(w.as_bytes());
    }
    d.extend_from_slice(DICTIONARY_TAIL.as_bytes());
    d
});

/// Serialises name/value pairs into an uncompressed header block.
fn header_block(headers: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(headers.len() as u32).to_be_bytes());
    for (name, value) in headers {
        let name = name.to_ascii_lowercase();
        out.extend_from_slice(&(name.len() as u32).to_be_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&(value.len() as u32).to_be_bytes());
        out.extend_from_slice(value.as_bytes());
    }
    out
}

/// Parses an uncompressed header block.
fn parse_header_block(mut block: &[u8]) -> Result<Headers, SpdyError> {
    let count = take_len(&mut block)?;
    let mut headers = Vec::new();
    for _ in 0..count {
        let name = take_text(&mut block)?;
        let value = take_text(&mut block)?;
        headers.push((name.to_ascii_lowercase(), value));
    }
    Ok(headers)
}

/// A 32-bit length at the start of `block`, which then starts after it.
fn take_len(block: &mut &[u8]) -> Result<usize, SpdyError> {
    let Some((len, rest)) = block.split_first_chunk::<4>() else {
        return Err(SpdyError::HeaderBlock("truncated length".into()));
    };
    *block = rest;
    Ok(u32::from_be_bytes(*len) as usize)
}

/// A length-prefixed UTF-8 name or value at the start of `block`, which then starts after it.
fn take_text(block: &mut &[u8]) -> Result<String, SpdyError> {
    let len = take_len(block)?;
    if block.len() < len {
        return Err(SpdyError::HeaderBlock("truncated name or value".into()));
    }
    let (text, rest) = block.split_at(len);
    *block = rest;
    String::from_utf8(text.to_vec())
        .map_err(|_| SpdyError::HeaderBlock("name or value is not UTF-8".into()))
}

/// Compresses this side's header blocks: one zlib stream for the session, primed with the SPDY dictionary.
pub struct HeaderCompressor {
    z: Compress,
}

impl HeaderCompressor {
    pub fn new() -> Result<HeaderCompressor, SpdyError> {
        let mut z = Compress::new(Compression::default(), true);
        z.set_dictionary(&DICTIONARY)
            .map_err(|e| SpdyError::Zlib(format!("setting the dictionary: {e}")))?;
        Ok(HeaderCompressor { z })
    }

    /// The compressed header block carrying `headers`, ending with a sync flush so the peer can decode it whole.
    pub fn compress(&mut self, headers: &[(&str, &str)]) -> Result<Bytes, SpdyError> {
        let input = header_block(headers);
        let mut out = Vec::with_capacity(input.len() + 64);
        let mut consumed = 0;
        loop {
            out.reserve(256);
            let before = self.z.total_in();
            self.z
                .compress_vec(&input[consumed..], &mut out, FlushCompress::Sync)
                .map_err(|e| SpdyError::Zlib(e.to_string()))?;
            consumed += (self.z.total_in() - before) as usize;
            // Done when all input went in and the flush had room to finish.
            if consumed == input.len() && out.len() < out.capacity() {
                return Ok(Bytes::from(out));
            }
        }
    }
}

/// Decompresses the peer's header blocks, in the order they were sent.
pub struct HeaderDecompressor {
    z: Decompress,
}

impl Default for HeaderDecompressor {
    fn default() -> Self {
        HeaderDecompressor {
            z: Decompress::new(true),
        }
    }
}

impl HeaderDecompressor {
    /// The name/value pairs of one compressed header block.
    pub fn decompress(&mut self, block: &[u8]) -> Result<Headers, SpdyError> {
        let mut out = Vec::with_capacity(block.len() * 4 + 64);
        let mut consumed = 0;
        loop {
            if out.len() == out.capacity() {
                out.reserve(out.capacity().max(256));
            }
            let (before_in, before_out) = (self.z.total_in(), self.z.total_out());
            let result = self
                .z
                .decompress_vec(&block[consumed..], &mut out, FlushDecompress::Sync);
            consumed += (self.z.total_in() - before_in) as usize;
            let stalled = self.z.total_in() == before_in && self.z.total_out() == before_out;
            match result {
                Ok(Status::StreamEnd) => {
                    return Err(SpdyError::Zlib("the peer ended the header stream".into()));
                }
                Ok(_) => {
                    if consumed == block.len() && out.len() < out.capacity() {
                        break;
                    }
                    if stalled && out.len() < out.capacity() {
                        return Err(SpdyError::Zlib("the header block is truncated".into()));
                    }
                }
                Err(e) if e.needs_dictionary().is_some() => {
                    self.z
                        .set_dictionary(&DICTIONARY)
                        .map_err(|e| SpdyError::Zlib(format!("setting the dictionary: {e}")))?;
                }
                Err(e) => return Err(SpdyError::Zlib(e.to_string())),
            }
            if out.len() > MAX_HEADER_BLOCK {
                return Err(SpdyError::HeaderBlock("larger than 1 MiB".into()));
            }
        }
        parse_header_block(&out)
    }
}

/// The value of header `name` (lower-case) in `headers`.
pub fn header<'a>(headers: &'a Headers, name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(frame: Frame) {
        let wire = frame.encode();
        let mut d = FrameDecoder::default();
        // Fed a byte at a time: frames may arrive split anywhere.
        for (i, b) in wire.iter().enumerate() {
            assert_eq!(
                d.next_frame().unwrap(),
                None,
                "frame complete after {i} bytes"
            );
            d.extend(&[*b]);
        }
        assert_eq!(d.next_frame().unwrap(), Some(frame));
        assert_eq!(d.next_frame().unwrap(), None);
    }

    #[test]
    fn every_frame_type_round_trips() {
        round_trip(Frame::Data {
            stream: 7,
            flags: FLAG_FIN,
            data: Bytes::from_static(b"hello"),
        });
        round_trip(Frame::Data {
            stream: 9,
            flags: 0,
            data: Bytes::new(),
        });
        round_trip(Frame::SynStream {
            stream: 1,
            associated: 0,
            priority: 3,
            flags: FLAG_FIN,
            block: Bytes::from_static(b"\x78\x01abc"),
        });
        round_trip(Frame::SynReply {
            stream: 1,
            flags: 0,
            block: Bytes::from_static(b"xyz"),
        });
        round_trip(Frame::RstStream {
            stream: 3,
            status: 5, // CANCEL
        });
        round_trip(Frame::Settings {
            flags: 0,
            entries: vec![(1, 7, 65536), (0, 4, 100)],
        });
        round_trip(Frame::Ping { id: 0xffff_fff1 });
        round_trip(Frame::GoAway {
            last_good: 5,
            status: 0,
        });
        round_trip(Frame::Headers {
            stream: 5,
            flags: FLAG_FIN,
            block: Bytes::from_static(b"q"),
        });
        round_trip(Frame::WindowUpdate {
            stream: 0,
            delta: 1 << 20,
        });
        round_trip(Frame::Unknown { kind: 10 });
    }

    #[test]
    fn wire_layout_follows_the_specification() {
        assert_eq!(
            Frame::Ping { id: 1 }.encode().as_ref(),
            [0x80, 0x03, 0x00, 0x06, 0x00, 0x00, 0x00, 0x04, 0, 0, 0, 1]
        );
        assert_eq!(
            Frame::Data {
                stream: 3,
                flags: FLAG_FIN,
                data: Bytes::from_static(b"ab"),
            }
            .encode()
            .as_ref(),
            [0, 0, 0, 3, 0x01, 0, 0, 2, b'a', b'b']
        );
        assert_eq!(
            Frame::RstStream {
                stream: 1,
                status: rst::PROTOCOL_ERROR,
            }
            .encode()
            .as_ref(),
            [
                0x80, 0x03, 0x00, 0x03, 0x00, 0x00, 0x00, 0x08, 0, 0, 0, 1, 0, 0, 0, 1
            ]
        );
    }

    #[test]
    fn malformed_frames_are_errors() {
        let mut d = FrameDecoder::default();
        d.extend(&[0x80, 0x02, 0x00, 0x06, 0, 0, 0, 4, 0, 0, 0, 1]);
        assert!(matches!(d.next_frame(), Err(SpdyError::Version(2))));
        let mut d = FrameDecoder::default();
        d.extend(&[0x80, 0x03, 0x00, 0x03, 0, 0, 0, 2, 0, 1]);
        assert!(matches!(d.next_frame(), Err(SpdyError::Short { .. })));
        let mut d = FrameDecoder::default();
        d.extend(&[0x80, 0x03, 0x00, 0x04, 0, 0, 0, 4, 0xff, 0xff, 0xff, 0xff]);
        assert!(matches!(d.next_frame(), Err(SpdyError::Short { .. })));
        let mut z = HeaderDecompressor::default();
        assert!(z.decompress(b"not zlib at all").is_err());
        assert!(parse_header_block(&[0, 0, 0, 1, 0, 0, 0, 9, b'a']).is_err());
    }

    #[test]
    fn the_dictionary_is_spdy3s() {
        assert_eq!(DICTIONARY.len(), 1423);
        assert!(DICTIONARY.starts_with(b"\0\0\0\x07options\0\0\0\x04head"));
        assert!(DICTIONARY.ends_with(b"utf-,*,enq=0."));
    }

    #[test]
    fn header_blocks_round_trip_through_one_zlib_stream_per_direction() {
        let mut c = HeaderCompressor::new().unwrap();
        let mut d = HeaderDecompressor::default();
        let first = c
            .compress(&[
                ("streamtype", "error"),
                ("port", "2379"),
                ("requestid", "0"),
            ])
            .unwrap();
        // The first block announces the dictionary (FDICT) in its zlib header.
        assert_eq!(first[0], 0x78);
        assert_ne!(first[1] & 0x20, 0);
        let second = c
            .compress(&[("streamtype", "data"), ("port", "2379"), ("requestid", "0")])
            .unwrap();
        let empty = c.compress(&[]).unwrap();
        assert_eq!(
            d.decompress(&first).unwrap(),
            [
                ("streamtype".to_string(), "error".to_string()),
                ("port".into(), "2379".into()),
                ("requestid".into(), "0".into())
            ]
        );
        let h = d.decompress(&second).unwrap();
        assert_eq!(header(&h, "streamtype"), Some("data"));
        assert_eq!(d.decompress(&empty).unwrap(), []);
    }

    #[test]
    fn blocks_from_c_zlib_decompress() {
        // `streamtype: data` compressed by C zlib (level 9, SPDY/3 dictionary, sync flush), as Go's writer does.
        let block = [
            0x78, 0xf9, 0xe3, 0xc6, 0xa7, 0xc2, 0x02, 0xa6, 0x23, 0x46, 0x70, 0x3a, 0x2b, 0x29,
            0x4a, 0x4d, 0xcc, 0x45, 0x2a, 0x4a, 0x12, 0x01, 0x00, 0x00, 0x00, 0xff, 0xff,
        ];
        let h = HeaderDecompressor::default().decompress(&block).unwrap();
        assert_eq!(h, [("streamtype".to_string(), "data".to_string())]);
    }
}
