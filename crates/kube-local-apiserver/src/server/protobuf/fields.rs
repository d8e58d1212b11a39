//! Turning decoded k8s-pb messages into the JSON that `encoding/json` would produce for the Go struct the API
//! server decodes the same bytes into.
//!
//! The wire cannot tell what Go's JSON tags say, so every converted field carries its Go shape (see `messages!`):
//! gogo-protobuf writes non-pointer fields always (an empty string, a 0, an empty struct) and pointer fields only
//! when set. So a present `0` means "unset" for a non-pointer `int32 omitempty` but "explicitly 0" for a `*int32`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use std::collections::BTreeMap;

use k8s_pb::apimachinery::pkg::api::resource::Quantity;
use k8s_pb::apimachinery::pkg::apis::meta::v1::{FieldsV1, MicroTime, Time};
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Map, Value};

/// Why a message could not be converted.
#[derive(Debug, PartialEq)]
pub enum ConvertError {
    /// A field kube-local does not convert carries a value (its JSON path).
    Unsupported(String),
    /// A value with no valid JSON form (its JSON path, why).
    Invalid(String, String),
}

pub type Converted = Result<Option<Value>, ConvertError>;

/// A message converted as a whole (its JSON object, or a special form such as Time's string).
pub trait ToJson: Sized + Default + PartialEq {
    fn to_json(self, path: &str) -> Result<Value, ConvertError>;
}

/// One field of a message, by its Go shape.
pub trait Field: Sized {
    /// Non-pointer field with `omitempty`: the zero value is left out. (`encoding/json` never omits structs.)
    fn omit(self, path: &str) -> Converted;
    /// Non-pointer field without `omitempty`: always written, nil slices and maps as `null`.
    fn keep(self, path: &str) -> Converted;
    /// Pointer field: written when present on the wire, whatever its value.
    fn ptr(self, path: &str) -> Converted {
        self.omit(path)
    }
}

/// Whether a field kube-local does not convert carries a value.
pub trait Presence {
    /// For a non-pointer field: a non-zero value (Go always writes these, zero or not).
    fn is_nonzero(&self) -> bool;
    /// For a pointer field: present on the wire at all.
    fn is_present(&self) -> bool;
}

impl<T: Default + PartialEq> Presence for Option<T> {
    fn is_nonzero(&self) -> bool {
        self.as_ref().is_some_and(|v| *v != T::default())
    }
    fn is_present(&self) -> bool {
        self.is_some()
    }
}

impl<T> Presence for Vec<T> {
    fn is_nonzero(&self) -> bool {
        !self.is_empty()
    }
    fn is_present(&self) -> bool {
        !self.is_empty()
    }
}

impl<K, V> Presence for BTreeMap<K, V> {
    fn is_nonzero(&self) -> bool {
        !self.is_empty()
    }
    fn is_present(&self) -> bool {
        !self.is_empty()
    }
}

pub fn child(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

/// The JSON name of a k8s-pb field: snake_case back to the lowerCamelCase the proto (and JSON) uses.
pub fn camel(ident: &str) -> String {
    let ident = ident.trim_start_matches("r#");
    let mut out = String::with_capacity(ident.len());
    let mut upper = false;
    for c in ident.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

macro_rules! scalar_fields {
    ($($t:ty),*) => {$(
        impl Field for Option<$t> {
            fn omit(self, _: &str) -> Converted {
                Ok(self.filter(|v| *v != <$t>::default()).map(Value::from))
            }
            fn keep(self, _: &str) -> Converted {
                Ok(Some(Value::from(self.unwrap_or_default())))
            }
            fn ptr(self, _: &str) -> Converted {
                Ok(self.map(Value::from))
            }
        }
        impl Field for Vec<$t> {
            fn omit(self, _: &str) -> Converted {
                Ok((!self.is_empty()).then(|| Value::from(self)))
            }
            fn keep(self, _: &str) -> Converted {
                Ok(Some(if self.is_empty() { Value::Null } else { Value::from(self) }))
            }
        }
    )*};
}
scalar_fields!(String, i32, i64, bool);

fn base64(bytes: &[u8]) -> Value {
    Value::String(BASE64.encode(bytes))
}

/// `[]byte` (nil and empty are alike on the wire and both omitted).
impl Field for Option<Vec<u8>> {
    fn omit(self, _: &str) -> Converted {
        Ok(self.filter(|b| !b.is_empty()).map(|b| base64(&b)))
    }
    fn keep(self, _: &str) -> Converted {
        Ok(Some(
            self.filter(|b| !b.is_empty())
                .map_or(Value::Null, |b| base64(&b)),
        ))
    }
}

fn map_field<V>(
    map: BTreeMap<String, V>,
    path: &str,
    keep: bool,
    mut f: impl FnMut(V, &str) -> Result<Value, ConvertError>,
) -> Converted {
    if map.is_empty() {
        return Ok(keep.then_some(Value::Null));
    }
    let mut out = Map::new();
    for (k, v) in map {
        let value = f(v, &format!("{path}[{k}]"))?;
        out.insert(k, value);
    }
    Ok(Some(Value::Object(out)))
}

impl Field for BTreeMap<String, String> {
    fn omit(self, path: &str) -> Converted {
        map_field(self, path, false, |v, _| Ok(Value::String(v)))
    }
    fn keep(self, path: &str) -> Converted {
        map_field(self, path, true, |v, _| Ok(Value::String(v)))
    }
}

/// `map[string][]byte` (Secret data, ConfigMap binaryData): base64 strings in JSON.
impl Field for BTreeMap<String, Vec<u8>> {
    fn omit(self, path: &str) -> Converted {
        map_field(self, path, false, |v, _| Ok(base64(&v)))
    }
    fn keep(self, path: &str) -> Converted {
        map_field(self, path, true, |v, _| Ok(base64(&v)))
    }
}

impl<M: ToJson> Field for BTreeMap<String, M> {
    fn omit(self, path: &str) -> Converted {
        map_field(self, path, false, |v, p| v.to_json(p))
    }
    fn keep(self, path: &str) -> Converted {
        map_field(self, path, true, |v, p| v.to_json(p))
    }
}

/// An embedded message. A non-pointer struct is always written (absent = its zero value); a pointer one when present.
impl<M: ToJson> Field for Option<M> {
    fn omit(self, path: &str) -> Converted {
        self.unwrap_or_default().to_json(path).map(Some)
    }
    fn keep(self, path: &str) -> Converted {
        self.omit(path)
    }
    fn ptr(self, path: &str) -> Converted {
        self.map(|m| m.to_json(path)).transpose()
    }
}

impl<M: ToJson> Field for Vec<M> {
    fn omit(self, path: &str) -> Converted {
        if self.is_empty() {
            return Ok(None);
        }
        self.keep(path)
    }
    fn keep(self, path: &str) -> Converted {
        if self.is_empty() {
            return Ok(Some(Value::Null));
        }
        let items = self
            .into_iter()
            .enumerate()
            .map(|(i, m)| m.to_json(&format!("{path}[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Some(Value::Array(items)))
    }
}

/// The fields of an embedded (`json:",inline"`) struct, merged into the parent's object.
pub fn inline<M: ToJson>(
    m: Option<M>,
    path: &str,
    out: &mut Map<String, Value>,
) -> Result<(), ConvertError> {
    match m.unwrap_or_default().to_json(path)? {
        Value::Object(fields) => {
            out.extend(fields);
            Ok(())
        }
        other => Err(ConvertError::Invalid(
            path.to_string(),
            format!("inline struct converted to {other}"),
        )),
    }
}

/// Seconds since the epoch as Go's `time.Time` marshals it (UTC, RFC 3339), `None` outside Go's range.
fn rfc3339(seconds: i64, nanos: i32, micros: bool) -> Option<String> {
    let ts = jiff::Timestamp::new(seconds, if micros { nanos } else { 0 }).ok()?;
    Some(if micros {
        ts.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string()
    } else {
        ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
    })
}

/// Go's zero `time.Time` (0001-01-01T00:00:00Z), which marshals to JSON `null`.
const GO_ZERO_TIME: i64 = -62_135_596_800;

fn time_json(
    path: &str,
    seconds: Option<i64>,
    nanos: Option<i32>,
    micros: bool,
) -> Result<Value, ConvertError> {
    let (s, n) = (seconds.unwrap_or(0), nanos.unwrap_or(0));
    // An empty message is the zero time (metav1.Time marshals zero as no bytes at all).
    if (seconds.is_none() && nanos.is_none()) || (s == GO_ZERO_TIME && (n == 0 || !micros)) {
        return Ok(Value::Null);
    }
    rfc3339(s, n, micros).map(Value::String).ok_or_else(|| {
        ConvertError::Invalid(path.to_string(), format!("time out of range: {s}s {n}ns"))
    })
}

/// metav1.Time: upstream's protobuf decoding keeps whole seconds only (`time.Unix(p.Seconds, 0)`).
impl ToJson for Time {
    fn to_json(self, path: &str) -> Result<Value, ConvertError> {
        time_json(path, self.seconds, self.nanos, false)
    }
}

/// metav1.MicroTime: microseconds are kept, as in its JSON form.
impl ToJson for MicroTime {
    fn to_json(self, path: &str) -> Result<Value, ConvertError> {
        time_json(path, self.seconds, self.nanos, true)
    }
}

/// intstr.IntOrString: `type` 0 is an int, 1 a string.
impl ToJson for IntOrString {
    fn to_json(self, path: &str) -> Result<Value, ConvertError> {
        match self.r#type.unwrap_or(0) {
            0 => Ok(Value::from(self.int_val.unwrap_or(0))),
            1 => Ok(Value::from(self.str_val.unwrap_or_default())),
            t => Err(ConvertError::Invalid(
                path.to_string(),
                format!("IntOrString type {t} is neither 0 (int) nor 1 (string)"),
            )),
        }
    }
}

/// resource.Quantity: its string form; the zero Quantity marshals as "0".
impl ToJson for Quantity {
    fn to_json(self, _: &str) -> Result<Value, ConvertError> {
        Ok(Value::String(
            self.string
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "0".into()),
        ))
    }
}

/// metav1.FieldsV1: raw JSON bytes, written as that JSON.
impl ToJson for FieldsV1 {
    fn to_json(self, path: &str) -> Result<Value, ConvertError> {
        let raw = self.raw.unwrap_or_default();
        if raw.is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&raw).map_err(|e| {
            ConvertError::Invalid(path.to_string(), format!("fieldsV1 is not JSON: {e}"))
        })
    }
}

/// Declares how messages convert, one line per field: `field: shape` or `field as "jsonName": shape` where the
/// JSON name is not the camelCase of the field (acronyms). Shapes: `omit` (non-pointer, `omitempty`), `keep`
/// (non-pointer without `omitempty`, and structs), `ptr` (pointer), `inline` (embedded struct), `unsupported`
/// (a non-pointer field kube-local does not convert: rejected when non-zero) and `unsupported_ptr` (rejected when
/// present). Every field must be listed — the destructuring fails to compile otherwise — so a field added to
/// k8s-pb cannot be dropped silently. `=> openapi::Type` names the k8s-openapi type whose properties the JSON
/// names are checked against in tests.
macro_rules! messages {
    ($($ty:path => $schema:ty { $($field:ident $(as $json:literal)? : $shape:ident),* $(,)? })*) => {
        $(
            impl $crate::server::protobuf::fields::ToJson for $ty {
                fn to_json(
                    self,
                    path: &str,
                ) -> Result<serde_json::Value, $crate::server::protobuf::fields::ConvertError> {
                    #[allow(unused_imports)]
                    use $crate::server::protobuf::fields::{Field as _, Presence as _};
                    let $ty { $($field),* } = self;
                    let mut out = serde_json::Map::new();
                    $( messages!(@emit out, path, $field, messages!(@name $field $($json)?), $shape); )*
                    Ok(serde_json::Value::Object(out))
                }
            }
            // The k8s-openapi type the JSON stands for is named (and checked) in every build.
            const _: Option<&'static $schema> = None;
        )*

        /// (message, k8s-openapi schema, names of the JSON fields it writes) for the name check in tests.
        #[cfg(test)]
        pub(super) fn json_names() -> Vec<(&'static str, serde_json::Value, Vec<String>)> {
            vec![$(
                (
                    stringify!($ty),
                    serde_json::to_value(schemars::schema_for!($schema)).unwrap_or_default(),
                    [$( messages!(@check $field, messages!(@name $field $($json)?), $shape) ),*]
                        .into_iter()
                        .flatten()
                        .collect::<Vec<String>>(),
                )
            ),*]
        }
    };
    (@name $field:ident $json:literal) => { String::from($json) };
    (@name $field:ident) => { $crate::server::protobuf::fields::camel(stringify!($field)) };
    (@check $field:ident, $name:expr, inline) => { None };
    (@check $field:ident, $name:expr, unsupported) => { None };
    (@check $field:ident, $name:expr, unsupported_ptr) => { None };
    (@check $field:ident, $name:expr, $shape:ident) => { Some($name) };
    (@emit $out:ident, $path:ident, $field:ident, $name:expr, inline) => {
        $crate::server::protobuf::fields::inline($field, $path, &mut $out)?;
    };
    (@emit $out:ident, $path:ident, $field:ident, $name:expr, unsupported) => {
        if $field.is_nonzero() {
            return Err($crate::server::protobuf::fields::ConvertError::Unsupported(
                $crate::server::protobuf::fields::child($path, &$name),
            ));
        }
    };
    (@emit $out:ident, $path:ident, $field:ident, $name:expr, unsupported_ptr) => {
        if $field.is_present() {
            return Err($crate::server::protobuf::fields::ConvertError::Unsupported(
                $crate::server::protobuf::fields::child($path, &$name),
            ));
        }
    };
    (@emit $out:ident, $path:ident, $field:ident, $name:expr, $shape:ident) => {{
        let name: String = $name;
        let at = $crate::server::protobuf::fields::child($path, &name);
        if let Some(v) = $field.$shape(&at)? {
            $out.insert(name, v);
        }
    }};
}
pub(crate) use messages;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn camel_case_names() {
        assert_eq!(camel("generate_name"), "generateName");
        assert_eq!(camel("r#type"), "type");
        assert_eq!(camel("fields_v1"), "fieldsV1");
    }

    #[test]
    fn times_drop_nanos_and_zero_is_null() {
        let t = |s, n| {
            Time {
                seconds: s,
                nanos: n,
            }
            .to_json("t")
            .unwrap()
        };
        assert_eq!(
            t(Some(1_700_000_000), Some(5)),
            Value::from("2023-11-14T22:13:20Z")
        );
        assert_eq!(t(None, None), Value::Null);
        assert_eq!(t(Some(GO_ZERO_TIME), None), Value::Null);
        let m = MicroTime {
            seconds: Some(1_700_000_000),
            nanos: Some(123_456_789),
        };
        assert_eq!(
            m.to_json("t").unwrap(),
            Value::from("2023-11-14T22:13:20.123456Z")
        );
    }

    #[test]
    fn int_or_string_and_quantity() {
        let i = IntOrString {
            r#type: Some(0),
            int_val: Some(8080),
            str_val: Some(String::new()),
        };
        assert_eq!(i.to_json("p").unwrap(), Value::from(8080));
        let s = IntOrString {
            r#type: Some(1),
            int_val: Some(0),
            str_val: Some("http".into()),
        };
        assert_eq!(s.to_json("p").unwrap(), Value::from("http"));
        assert!(
            IntOrString {
                r#type: Some(7),
                ..Default::default()
            }
            .to_json("p")
            .is_err()
        );
        assert_eq!(Quantity::default().to_json("q").unwrap(), Value::from("0"));
        assert_eq!(
            Quantity {
                string: Some("100m".into())
            }
            .to_json("q")
            .unwrap(),
            Value::from("100m")
        );
    }

    #[test]
    fn shapes_follow_go_pointer_and_omitempty() {
        assert_eq!(Some(0i32).omit("x").unwrap(), None);
        assert_eq!(Some(0i32).ptr("x").unwrap(), Some(Value::from(0)));
        assert_eq!(None::<i32>.keep("x").unwrap(), Some(Value::from(0)));
        assert_eq!(Some(String::new()).omit("x").unwrap(), None);
        assert_eq!(Some(String::new()).ptr("x").unwrap(), Some(Value::from("")));
        assert!(!Some(String::new()).is_nonzero());
        assert!(Some(String::new()).is_present());
        let bytes: BTreeMap<String, Vec<u8>> = [("k".to_string(), b"hi".to_vec())].into();
        assert_eq!(
            bytes.omit("data").unwrap(),
            Some(serde_json::json!({"k": "aGk="}))
        );
    }
}
