//! How the `s3` sink compresses an object: a streaming encoder whose output is taken out in
//! parts as it grows, so an object is never held whole beside its records.
//!
//! Why async-compression: one well-kept crate for both codecs, gzip (flate2 underneath) and zstd
//! (the reference C library), behind tokio's `AsyncWrite`. An encoder writes into a `Vec`: the
//! bytes it has produced so far are the next part to upload; taking them out leaves the stream
//! going, and `finish` writes its trailer.

use std::io;

use async_compression::tokio::write::{GzipEncoder, ZstdEncoder};
use sluice_crds::S3Compression;
use tokio::io::AsyncWriteExt as _;

/// The object's name ending and `Content-Encoding` for a compression.
pub fn extension(compression: S3Compression) -> &'static str {
    match compression {
        S3Compression::None => ".jsonl",
        S3Compression::Gzip => ".jsonl.gz",
        S3Compression::Zstd => ".jsonl.zst",
    }
}

/// `Content-Encoding` of a compressed object (absent for plain JSON lines).
pub fn content_encoding(compression: S3Compression) -> Option<&'static str> {
    match compression {
        S3Compression::None => None,
        S3Compression::Gzip => Some("gzip"),
        S3Compression::Zstd => Some("zstd"),
    }
}

/// One object's byte stream, compressed or not.
pub enum Encoder {
    Plain(Vec<u8>),
    Gzip(GzipEncoder<Vec<u8>>),
    Zstd(ZstdEncoder<Vec<u8>>),
}

impl Encoder {
    pub fn new(compression: S3Compression) -> Self {
        match compression {
            S3Compression::None => Self::Plain(Vec::new()),
            S3Compression::Gzip => Self::Gzip(GzipEncoder::new(Vec::new())),
            S3Compression::Zstd => Self::Zstd(ZstdEncoder::new(Vec::new())),
        }
    }

    /// Feed `bytes` (whole JSON lines) to the stream.
    pub async fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Self::Plain(out) => {
                out.extend_from_slice(bytes);
                Ok(())
            }
            Self::Gzip(e) => e.write_all(bytes).await,
            Self::Zstd(e) => e.write_all(bytes).await,
        }
    }

    /// End the stream (a compressor's trailer); nothing may be written after.
    pub async fn finish(&mut self) -> io::Result<()> {
        match self {
            Self::Plain(_) => Ok(()),
            Self::Gzip(e) => e.shutdown().await,
            Self::Zstd(e) => e.shutdown().await,
        }
    }

    fn output(&mut self) -> &mut Vec<u8> {
        match self {
            Self::Plain(out) => out,
            Self::Gzip(e) => e.get_mut(),
            Self::Zstd(e) => e.get_mut(),
        }
    }

    /// Bytes produced and not yet taken.
    pub fn ready(&mut self) -> usize {
        self.output().len()
    }

    /// Take the bytes produced so far (the next part of the object).
    pub fn take(&mut self) -> Vec<u8> {
        std::mem::take(self.output())
    }

    /// Put back `taken` (an upload of it failed) before what was produced since.
    pub fn restore(&mut self, mut taken: Vec<u8>) {
        let out = self.output();
        taken.append(out);
        *out = taken;
    }
}

#[cfg(test)]
mod tests {
    use async_compression::tokio::bufread::{GzipDecoder, ZstdDecoder};
    use tokio::io::AsyncReadExt as _;

    use super::*;

    async fn roundtrip(compression: S3Compression) -> (Vec<u8>, usize) {
        let lines: Vec<u8> = (0..5000).flat_map(|i| format!("{{\"n\":{i}}}\n").into_bytes()).collect();
        let mut encoder = Encoder::new(compression);
        let mut object = Vec::new();
        for chunk in lines.chunks(7000) {
            encoder.write(chunk).await.unwrap();
            let part = encoder.take();
            // A failed upload puts its part back: the object is still one stream.
            encoder.restore(part);
            object.extend(encoder.take());
        }
        encoder.finish().await.unwrap();
        object.extend(encoder.take());
        let mut decoded = Vec::new();
        match compression {
            S3Compression::None => decoded.clone_from(&object),
            S3Compression::Gzip => {
                GzipDecoder::new(&object[..]).read_to_end(&mut decoded).await.unwrap();
            }
            S3Compression::Zstd => {
                ZstdDecoder::new(&object[..]).read_to_end(&mut decoded).await.unwrap();
            }
        }
        assert_eq!(decoded, lines, "{compression:?}");
        (object, lines.len())
    }

    #[tokio::test]
    async fn parts_taken_as_they_grow_make_one_stream_that_decodes_to_the_lines() {
        for compression in [S3Compression::None, S3Compression::Gzip, S3Compression::Zstd] {
            let (object, raw) = roundtrip(compression).await;
            if compression != S3Compression::None {
                assert!(object.len() * 4 < raw, "{compression:?}: {} of {raw}", object.len());
            }
        }
    }
}
