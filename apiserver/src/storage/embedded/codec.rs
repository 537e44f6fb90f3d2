//! The embedded store's on-disk records: a key's current value, and one log entry
//! per revision (the change, with the value before it, so reads at an older revision
//! and watches from one can be answered from the log).

use bytes::Bytes;

use crate::storage::{KeyValue, StoreError, WatchEvent};

/// A key's record in the `kv` table: create revision, mod revision, version, value.
pub(super) fn encode_record(kv: &KeyValue) -> Vec<u8> {
    let mut out = Vec::with_capacity(24 + kv.value.len());
    out.extend_from_slice(&kv.create_revision.to_le_bytes());
    out.extend_from_slice(&kv.mod_revision.to_le_bytes());
    out.extend_from_slice(&kv.version.to_le_bytes());
    out.extend_from_slice(&kv.value);
    out
}

pub(super) fn decode_record(key: &str, bytes: &[u8]) -> Result<KeyValue, StoreError> {
    let mut reader = Reader(bytes);
    let create_revision = reader.i64()?;
    let mod_revision = reader.i64()?;
    let version = reader.i64()?;
    Ok(KeyValue {
        key: key.to_owned(),
        value: Bytes::copy_from_slice(reader.0),
        create_revision,
        mod_revision,
        version,
    })
}

const PUT: u8 = 1;
const DELETE: u8 = 2;

/// A log entry: `PUT kv prev?` or `DELETE revision prev`.
pub(super) fn encode_event(event: &WatchEvent) -> Vec<u8> {
    let mut out = Vec::new();
    match event {
        WatchEvent::Put { kv, prev } => {
            out.push(PUT);
            put_kv(&mut out, kv);
            match prev {
                Some(prev) => {
                    out.push(1);
                    put_kv(&mut out, prev);
                }
                None => out.push(0),
            }
        }
        WatchEvent::Delete { prev, revision } => {
            out.push(DELETE);
            out.extend_from_slice(&revision.to_le_bytes());
            put_kv(&mut out, prev);
        }
    }
    out
}

pub(super) fn decode_event(bytes: &[u8]) -> Result<WatchEvent, StoreError> {
    let mut reader = Reader(bytes);
    match reader.u8()? {
        PUT => {
            let kv = reader.kv()?;
            let prev = match reader.u8()? {
                0 => None,
                _ => Some(reader.kv()?),
            };
            Ok(WatchEvent::Put { kv, prev })
        }
        DELETE => {
            let revision = reader.i64()?;
            let prev = reader.kv()?;
            Ok(WatchEvent::Delete { prev, revision })
        }
        other => Err(corrupt(&format!("unknown log entry type {other}"))),
    }
}

/// The key a log entry changed, read without decoding the entry's values (a read at an
/// older revision and a replay pass over the log's other keys).
pub(super) fn event_key(bytes: &[u8]) -> Result<&str, StoreError> {
    let mut reader = Reader(bytes);
    match reader.u8()? {
        PUT => {}
        DELETE => {
            reader.i64()?;
        }
        other => return Err(corrupt(&format!("unknown log entry type {other}"))),
    }
    let key_len = reader.u32()? as usize;
    std::str::from_utf8(reader.take(key_len)?).map_err(|_| corrupt("key is not UTF-8"))
}

fn put_kv(out: &mut Vec<u8>, kv: &KeyValue) {
    out.extend_from_slice(&(kv.key.len() as u32).to_le_bytes());
    out.extend_from_slice(kv.key.as_bytes());
    out.extend_from_slice(&(kv.value.len() as u32).to_le_bytes());
    out.extend_from_slice(&kv.value);
    out.extend_from_slice(&kv.create_revision.to_le_bytes());
    out.extend_from_slice(&kv.mod_revision.to_le_bytes());
    out.extend_from_slice(&kv.version.to_le_bytes());
}

fn corrupt(what: &str) -> StoreError {
    StoreError::backend(format!("embedded store is corrupt: {what}"))
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], StoreError> {
        if self.0.len() < n {
            return Err(corrupt("record is truncated"));
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, StoreError> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, StoreError> {
        let bytes = self.take(4)?;
        Ok(u32::from_le_bytes(
            bytes.try_into().expect("take(4) returns 4 bytes"),
        ))
    }

    fn i64(&mut self) -> Result<i64, StoreError> {
        let bytes = self.take(8)?;
        Ok(i64::from_le_bytes(
            bytes.try_into().expect("take(8) returns 8 bytes"),
        ))
    }

    fn kv(&mut self) -> Result<KeyValue, StoreError> {
        let key_len = self.u32()? as usize;
        let key = std::str::from_utf8(self.take(key_len)?)
            .map_err(|_| corrupt("key is not UTF-8"))?
            .to_owned();
        let value_len = self.u32()? as usize;
        let value = Bytes::copy_from_slice(self.take(value_len)?);
        Ok(KeyValue {
            key,
            value,
            create_revision: self.i64()?,
            mod_revision: self.i64()?,
            version: self.i64()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::Revision;

    fn kv(key: &str, value: &str, rev: Revision) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Bytes::copy_from_slice(value.as_bytes()),
            create_revision: 2,
            mod_revision: rev,
            version: rev - 1,
        }
    }

    #[test]
    fn records_and_events_round_trip() {
        let a = kv("/a", "{\"x\":1}", 3);
        assert_eq!(decode_record("/a", &encode_record(&a)).unwrap(), a);
        for event in [
            WatchEvent::Put {
                kv: a.clone(),
                prev: None,
            },
            WatchEvent::Put {
                kv: kv("/a", "2", 4),
                prev: Some(a.clone()),
            },
            WatchEvent::Delete {
                prev: a.clone(),
                revision: 5,
            },
        ] {
            let bytes = encode_event(&event);
            assert_eq!(decode_event(&bytes).unwrap(), event);
            assert_eq!(event_key(&bytes).unwrap(), event.key());
        }
        assert!(decode_event(&[PUT, 1, 0]).is_err());
        assert!(
            event_key(&[PUT, 9, 0, 0, 0, b'/']).is_err(),
            "a truncated key"
        );
        assert!(event_key(&[7]).is_err(), "an unknown entry type");
    }
}
