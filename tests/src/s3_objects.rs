//! What an `s3` sink wrote: the objects under a prefix, each read back as JSON lines (gzip and
//! zstd objects decompressed by their `Content-Encoding`, whose name ending must agree).

use anyhow::{Context as _, Result, ensure};
use async_compression::tokio::bufread::{GzipDecoder, ZstdDecoder};
use aws_sdk_s3::Client;
use futures::StreamExt as _;
use tokio::io::AsyncReadExt as _;

/// One object: its key, its stored size and its lines.
#[derive(Debug, Clone)]
pub struct Object {
    pub key: String,
    pub size: u64,
    pub content_encoding: Option<String>,
    pub lines: Vec<String>,
}

/// `(key, stored size)` of every object under `prefix`.
pub async fn list(client: &Client, bucket: &str, prefix: &str) -> Result<Vec<(String, u64)>> {
    let mut listed = Vec::new();
    let mut token = None;
    // Bounded: 1,000 keys a page, far more than a suite writes.
    for _page in 0..1000 {
        let page = client
            .list_objects_v2()
            .bucket(bucket)
            .prefix(prefix)
            .set_continuation_token(token)
            .send()
            .await
            .context("ListObjectsV2")?;
        for object in page.contents() {
            let size = u64::try_from(object.size().unwrap_or(0)).unwrap_or(0);
            listed.push((object.key().unwrap_or_default().to_owned(), size));
        }
        token = page.next_continuation_token().map(str::to_owned);
        if token.is_none() {
            break;
        }
    }
    Ok(listed)
}

/// Read `key` and split it into lines, decompressing it by its `Content-Encoding`.
pub async fn read(client: &Client, bucket: &str, key: &str, size: u64) -> Result<Object> {
    let got = client
        .get_object()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .with_context(|| format!("GetObject {key}"))?;
    let content_encoding = got.content_encoding().map(str::to_owned);
    let stored = got.body.collect().await.with_context(|| format!("reading {key}"))?.into_bytes();
    let mut raw = Vec::new();
    match content_encoding.as_deref() {
        Some("gzip") => {
            ensure!(key.ends_with(".jsonl.gz"), "{key}: gzip but not named .jsonl.gz");
            let mut decoder = GzipDecoder::new(&stored[..]);
            decoder.multiple_members(true);
            decoder.read_to_end(&mut raw).await.with_context(|| format!("{key}: not gzip"))?;
        }
        Some("zstd") => {
            ensure!(key.ends_with(".jsonl.zst"), "{key}: zstd but not named .jsonl.zst");
            ZstdDecoder::new(&stored[..])
                .read_to_end(&mut raw)
                .await
                .with_context(|| format!("{key}: not zstd"))?;
        }
        None => {
            ensure!(key.ends_with(".jsonl"), "{key}: no Content-Encoding but not named .jsonl");
            raw = stored.to_vec();
        }
        Some(other) => anyhow::bail!("{key}: unexpected Content-Encoding {other}"),
    }
    let text = String::from_utf8(raw).with_context(|| format!("{key}: not UTF-8"))?;
    let lines = text.lines().filter(|l| !l.trim().is_empty()).map(str::to_owned).collect();
    Ok(Object { key: key.to_owned(), size, content_encoding, lines })
}

/// Every object under `prefix`, read (8 at a time).
pub async fn read_all(client: &Client, bucket: &str, prefix: &str) -> Result<Vec<Object>> {
    let listed = list(client, bucket, prefix).await?;
    let read = futures::stream::iter(listed)
        .map(|(key, size)| async move { read(client, bucket, &key, size).await })
        .buffer_unordered(8)
        .collect::<Vec<_>>()
        .await;
    read.into_iter().collect()
}
