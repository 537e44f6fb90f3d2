//! [`Lean`]: a resource decoded without its `metadata.managedFields`.
//!
//! Every object the API server returns carries its managed fields (server-side apply's
//! record of who set which field): a third of a Plan's bytes, decoded by a typed client
//! into `serde_json::Value` trees its runner and controllers never read. Kubernetes has no
//! request option that leaves them out, so `Lean<K>` skips them while decoding: serde
//! passes over the value without building it, and `K` is decoded as it would be otherwise
//! with `metadata.managedFields` unset.
//!
//! Use `Api<Lean<K>>` where a client watches or writes many objects and reads none of
//! their managed fields. An object decoded this way and written back with a `PUT` loses
//! nothing: a write that sends no `managedFields` keeps the stored ones (kube's rule,
//! which Outpost's API server follows), and the server records the writer's fields.
//!
//! # Warning
//! Only the top-level `metadata` is trimmed, and only in a self-describing format with
//! string keys (JSON, which is what the API server speaks).

use std::borrow::Cow;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::value::{BorrowedStrDeserializer, StringDeserializer};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

/// `K`, decoded without `metadata.managedFields`; it serializes as `K`.
#[derive(Clone, Debug, PartialEq)]
pub struct Lean<K>(pub K);

impl<K> Lean<K> {
    /// The resource.
    pub fn into_inner(self) -> K {
        self.0
    }
}

impl<K: Serialize> Serialize for Lean<K> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de, K: Deserialize<'de>> Deserialize<'de> for Lean<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        K::deserialize(Trimming {
            inner: deserializer,
            level: Level::Object,
        })
        .map(Lean)
    }
}

impl<K: kube::Resource> kube::Resource for Lean<K> {
    type DynamicType = K::DynamicType;
    type Scope = K::Scope;

    fn kind(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::version(dt)
    }
    fn api_version(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::api_version(dt)
    }
    fn plural(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        self.0.meta()
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        self.0.meta_mut()
    }
}

/// Which map a [`Trimming`] deserializer hands out: the object (its `metadata` is
/// trimmed) or the object's `metadata` (its `managedFields` is skipped).
#[derive(Clone, Copy)]
enum Level {
    Object,
    Metadata,
}

/// A deserializer that decodes as `inner` does, trimming the maps of its `level`.
struct Trimming<D> {
    inner: D,
    level: Level,
}

macro_rules! forward {
    ($($method:ident($($arg:ident: $ty:ty),*);)*) => {$(
        fn $method<V: Visitor<'de>>(self, $($arg: $ty,)* visitor: V) -> Result<V::Value, D::Error> {
            self.inner.$method($($arg,)* Trimmed { visitor, level: self.level })
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Trimming<D> {
    type Error = D::Error;

    forward! {
        deserialize_any();
        deserialize_bool();
        deserialize_i8();
        deserialize_i16();
        deserialize_i32();
        deserialize_i64();
        deserialize_i128();
        deserialize_u8();
        deserialize_u16();
        deserialize_u32();
        deserialize_u64();
        deserialize_u128();
        deserialize_f32();
        deserialize_f64();
        deserialize_char();
        deserialize_str();
        deserialize_string();
        deserialize_bytes();
        deserialize_byte_buf();
        deserialize_option();
        deserialize_unit();
        deserialize_unit_struct(name: &'static str);
        deserialize_newtype_struct(name: &'static str);
        deserialize_seq();
        deserialize_tuple(len: usize);
        deserialize_tuple_struct(name: &'static str, len: usize);
        deserialize_map();
        deserialize_struct(name: &'static str, fields: &'static [&'static str]);
        deserialize_enum(name: &'static str, variants: &'static [&'static str]);
        deserialize_identifier();
        deserialize_ignored_any();
    }

    fn is_human_readable(&self) -> bool {
        self.inner.is_human_readable()
    }
}

/// `visitor`, handed the maps of its level trimmed; every other value as it is.
struct Trimmed<V> {
    visitor: V,
    level: Level,
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Trimmed<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.visitor.expecting(f)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.visitor.visit_map(Entries {
            map,
            level: self.level,
            metadata_next: false,
        })
    }

    fn visit_some<D2: Deserializer<'de>>(self, inner: D2) -> Result<V::Value, D2::Error> {
        self.visitor.visit_some(Trimming {
            inner,
            level: self.level,
        })
    }

    fn visit_newtype_struct<D2: Deserializer<'de>>(self, inner: D2) -> Result<V::Value, D2::Error> {
        self.visitor.visit_newtype_struct(Trimming {
            inner,
            level: self.level,
        })
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<V::Value, E> {
        self.visitor.visit_bool(v)
    }
    fn visit_i8<E: de::Error>(self, v: i8) -> Result<V::Value, E> {
        self.visitor.visit_i8(v)
    }
    fn visit_i16<E: de::Error>(self, v: i16) -> Result<V::Value, E> {
        self.visitor.visit_i16(v)
    }
    fn visit_i32<E: de::Error>(self, v: i32) -> Result<V::Value, E> {
        self.visitor.visit_i32(v)
    }
    fn visit_u8<E: de::Error>(self, v: u8) -> Result<V::Value, E> {
        self.visitor.visit_u8(v)
    }
    fn visit_u16<E: de::Error>(self, v: u16) -> Result<V::Value, E> {
        self.visitor.visit_u16(v)
    }
    fn visit_u32<E: de::Error>(self, v: u32) -> Result<V::Value, E> {
        self.visitor.visit_u32(v)
    }
    fn visit_f32<E: de::Error>(self, v: f32) -> Result<V::Value, E> {
        self.visitor.visit_f32(v)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<V::Value, E> {
        self.visitor.visit_i64(v)
    }
    fn visit_i128<E: de::Error>(self, v: i128) -> Result<V::Value, E> {
        self.visitor.visit_i128(v)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<V::Value, E> {
        self.visitor.visit_u64(v)
    }
    fn visit_u128<E: de::Error>(self, v: u128) -> Result<V::Value, E> {
        self.visitor.visit_u128(v)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<V::Value, E> {
        self.visitor.visit_f64(v)
    }
    fn visit_char<E: de::Error>(self, v: char) -> Result<V::Value, E> {
        self.visitor.visit_char(v)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<V::Value, E> {
        self.visitor.visit_str(v)
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<V::Value, E> {
        self.visitor.visit_borrowed_str(v)
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<V::Value, E> {
        self.visitor.visit_string(v)
    }
    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<V::Value, E> {
        self.visitor.visit_bytes(v)
    }
    fn visit_borrowed_bytes<E: de::Error>(self, v: &'de [u8]) -> Result<V::Value, E> {
        self.visitor.visit_borrowed_bytes(v)
    }
    fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<V::Value, E> {
        self.visitor.visit_byte_buf(v)
    }
    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.visitor.visit_none()
    }
    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.visitor.visit_unit()
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        self.visitor.visit_seq(seq)
    }
    fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        self.visitor.visit_enum(data)
    }
}

/// A map's entries: at the object level the value of `metadata` is trimmed, at the
/// metadata level `managedFields` is passed over.
struct Entries<A> {
    map: A,
    level: Level,
    /// The key just handed out was the object's `metadata`.
    metadata_next: bool,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Entries<A> {
    type Error = A::Error;

    fn next_key_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, A::Error> {
        loop {
            let Some(key) = self.map.next_key::<Key<'de>>()? else {
                return Ok(None);
            };
            match (self.level, key.as_str()) {
                (Level::Metadata, "managedFields") => {
                    self.map.next_value::<IgnoredAny>()?;
                    continue;
                }
                (Level::Object, "metadata") => self.metadata_next = true,
                _ => self.metadata_next = false,
            }
            return match key {
                Key::Borrowed(key) => seed.deserialize(BorrowedStrDeserializer::new(key)),
                Key::Owned(key) => seed.deserialize(StringDeserializer::new(key)),
            }
            .map(Some);
        }
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        if std::mem::take(&mut self.metadata_next) {
            self.map.next_value_seed(TrimmedSeed {
                seed,
                level: Level::Metadata,
            })
        } else {
            self.map.next_value_seed(seed)
        }
    }

    fn size_hint(&self) -> Option<usize> {
        self.map.size_hint()
    }
}

/// `seed`, decoding from a [`Trimming`] deserializer of `level`.
struct TrimmedSeed<S> {
    seed: S,
    level: Level,
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for TrimmedSeed<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, inner: D) -> Result<S::Value, D::Error> {
        self.seed.deserialize(Trimming {
            inner,
            level: self.level,
        })
    }
}

/// A map key, borrowed from the input where it can be (JSON keys without escapes).
enum Key<'de> {
    Borrowed(&'de str),
    Owned(String),
}

impl Key<'_> {
    fn as_str(&self) -> &str {
        match self {
            Key::Borrowed(key) => key,
            Key::Owned(key) => key,
        }
    }
}

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key::Borrowed(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key::Owned(v.to_owned()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key::Owned(v))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// kube's [`watcher`](kube::runtime::watcher()) of `api`'s objects, each decoded
/// [`Lean`] and handed out as `K`.
#[cfg(feature = "client")]
pub fn watcher<K>(
    api: kube::Api<Lean<K>>,
    config: kube::runtime::watcher::Config,
) -> impl futures::Stream<Item = kube::runtime::watcher::Result<kube::runtime::watcher::Event<K>>> + Send
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + fmt::Debug + Send + 'static,
{
    use futures::TryStreamExt as _;
    use kube::runtime::watcher::Event;
    kube::runtime::watcher(api, config).map_ok(|event| match event {
        Event::Apply(Lean(object)) => Event::Apply(object),
        Event::Delete(Lean(object)) => Event::Delete(object),
        Event::Init => Event::Init,
        Event::InitApply(Lean(object)) => Event::InitApply(object),
        Event::InitDone => Event::InitDone,
    })
}

#[cfg(test)]
#[path = "lean_tests.rs"]
mod tests;
