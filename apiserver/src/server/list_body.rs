//! A list's JSON written as it is sent, a chunk at a time, as kube-apiserver streams
//! list responses since 1.33 (KEP-5116): a list of every Install of a 10,000-install
//! fleet is ~30 MiB of JSON, and a body built whole held all of it (the cache holds
//! Installs compressed, so each is a copy) until the last byte was written. Now the
//! server holds one chunk, and the objects the answer was read from.

use std::borrow::Borrow;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{BufMut as _, Bytes, BytesMut};
use http_body::{Frame, SizeHint};

use crate::watch_cache::CachedObject;

/// About how much one chunk holds: objects are added until it is this long (one
/// object larger than that is a chunk of its own size).
const CHUNK: usize = 64 * 1024;

/// `{"apiVersion":..,"kind":..,"metadata":{..},"items":[` the objects, comma
/// separated, `]}`. Its length is known before the first byte (each object's JSON
/// length is kept with it), so the answer carries a `Content-Length` as before.
pub struct ListBody<T> {
    /// The list's head, up to and including `"items":[`; taken by the first chunk.
    head: Option<Bytes>,
    objects: std::vec::IntoIter<T>,
    /// Whether an object was written (the next one needs a comma).
    wrote_one: bool,
    /// Bytes not yet sent.
    remaining: u64,
}

impl<T: Borrow<CachedObject>> ListBody<T> {
    /// The body of a list with `head` (a JSON object's encoding: `{...}`) and its
    /// `items`.
    pub fn new(head: &[u8], objects: Vec<T>) -> Self {
        debug_assert!(head.ends_with(b"}"));
        let mut start = BytesMut::with_capacity(head.len() + 10);
        start.put_slice(&head[..head.len() - 1]);
        start.put_slice(b",\"items\":[");
        let items: usize = objects.iter().map(|o| o.borrow().json_len()).sum();
        let commas = objects.len().saturating_sub(1);
        let remaining = (start.len() + items + commas + b"]}".len()) as u64;
        ListBody {
            head: Some(start.freeze()),
            objects: objects.into_iter(),
            wrote_one: false,
            remaining,
        }
    }

    /// The next chunk, `None` once everything was sent.
    fn chunk(&mut self) -> Option<Bytes> {
        if self.remaining == 0 {
            return None;
        }
        let mut chunk = BytesMut::with_capacity(CHUNK + 1024);
        if let Some(head) = self.head.take() {
            chunk.put_slice(&head);
        }
        while chunk.len() < CHUNK {
            let Some(object) = self.objects.next() else {
                chunk.put_slice(b"]}");
                break;
            };
            if self.wrote_one {
                chunk.put_u8(b',');
            }
            self.wrote_one = true;
            chunk.put_slice(&object.borrow().json());
        }
        self.remaining = self.remaining.saturating_sub(chunk.len() as u64);
        Some(chunk.freeze())
    }
}

impl<T: Borrow<CachedObject> + Unpin> http_body::Body for ListBody<T> {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.get_mut().chunk().map(|c| Ok(Frame::data(c))))
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use http_body_util::BodyExt as _;
    use serde_json::{Value, json};

    use super::*;
    use crate::registry::ResourceType;

    /// `count` objects of about `size` bytes of JSON, every other one held compressed
    /// (as the cache holds Installs: served decompressed).
    fn objects(count: usize, size: usize) -> Vec<CachedObject> {
        let rt = ResourceType::schemaless("example.com", "v1", "Widget", "widgets", true);
        let dictionary: Arc<[u8]> = Arc::from(
            &br#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":""#[..],
        );
        (0..count)
            .map(|i| {
                let object = json!({
                    "apiVersion": "example.com/v1", "kind": "Widget",
                    "metadata": {"name": format!("w{i:05}"), "namespace": "default",
                                 "resourceVersion": "7"},
                    // Four bytes of JSON each.
                    "spec": {"text": "é\"".repeat(size / 4)},
                });
                let mut cached = CachedObject::new(&rt, format!("/w/{i:05}"), 7, &object);
                if i % 2 == 1 {
                    cached.compress_with(&dictionary);
                }
                cached
            })
            .collect()
    }

    #[tokio::test]
    async fn the_chunks_make_the_list_and_its_announced_length() {
        let head = json!({"apiVersion": "example.com/v1", "kind": "WidgetList",
                          "metadata": {"resourceVersion": "7", "continue": "x"}});
        let head_bytes = serde_json::to_vec(&head).unwrap();
        // None, one, a few, many (several chunks), objects larger than a chunk.
        for (count, size) in [(0, 0), (1, 10), (3, 100), (2_000, 300), (5, 3 * CHUNK)] {
            let objects = objects(count, size);
            if size > CHUNK {
                // The odd ones are served from a compressed copy.
                assert!(objects[1].size() * 4 < objects[1].json_len());
            }
            let mut expected = head.clone();
            expected["items"] = objects.iter().map(|o| o.value().unwrap()).collect();
            let length: usize = head_bytes.len()
                + r#","items":[]"#.len()
                + objects.iter().map(|o| o.json().len() + 1).sum::<usize>()
                - usize::from(count > 0);
            let body = ListBody::new(&head_bytes, objects);
            assert_eq!(
                http_body::Body::size_hint(&body).exact(),
                Some(length as u64),
                "{count} objects"
            );
            let mut body = std::pin::pin!(body);
            let mut sent = Vec::new();
            let mut chunks = 0;
            while let Some(frame) = body.frame().await {
                let data = frame.unwrap().into_data().unwrap();
                assert!(
                    data.len() <= CHUNK.max(size + 1024) + 2 * 1024,
                    "a chunk of {} with objects of {size}",
                    data.len()
                );
                sent.extend_from_slice(&data);
                chunks += 1;
                assert_eq!(
                    http_body::Body::size_hint(&*body).exact(),
                    Some((length - sent.len()) as u64),
                    "{count} objects, after {chunks} chunks"
                );
            }
            assert!(http_body::Body::is_end_stream(&*body));
            assert_eq!(sent.len(), length, "{count} objects");
            let sent: Value = serde_json::from_slice(&sent).unwrap();
            assert_eq!(sent, expected, "{count} objects of {size}");
            if count == 2_000 {
                assert!(chunks > 5, "{count} objects in {chunks} chunks");
            }
        }
    }
}
