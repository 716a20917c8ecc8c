//! Decoding of `application/vnd.kubernetes.protobuf` request bodies, as apimachinery's protobuf
//! serializer (`runtime/serializer/protobuf`) reads them: the `k8s\0` magic, the `runtime.Unknown`
//! envelope (`typeMeta`, `raw`) and the message in `raw`, converted to the JSON form of the object.
//! kubectl's typed commands (`certificate approve|deny`, `create configmap|secret|namespace|
//! serviceaccount`, `drain`'s evictions) send protobuf. Only the kinds those commands send have a
//! schema here (field numbers of `k8s.io/api/.../generated.proto`); other kinds are refused with 415.

use serde_json::{Map, Value, json};

use crate::util::rfc3339;

/// A protobuf body that cannot be decoded.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("protobuf: {0}")]
pub struct ProtoError(pub String);

#[derive(Clone, Copy)]
enum Ty {
    Str,
    Bytes,
    Int,
    Bool,
    Time,
    /// `metav1.FieldsV1`: raw JSON in field 1.
    FieldsV1,
    /// `ExtraValue`: a list of strings in field 1.
    StrList,
    Msg(&'static [F]),
    Map(&'static Ty),
}

/// A field: number, JSON name, type, repeated.
struct F(u32, &'static str, Ty, bool);

const fn f(n: u32, name: &'static str, ty: Ty) -> F {
    F(n, name, ty, false)
}
const fn r(n: u32, name: &'static str, ty: Ty) -> F {
    F(n, name, ty, true)
}

const OWNER_REF: &[F] = &[
    f(1, "kind", Ty::Str),
    f(3, "name", Ty::Str),
    f(4, "uid", Ty::Str),
    f(5, "apiVersion", Ty::Str),
    f(6, "controller", Ty::Bool),
    f(7, "blockOwnerDeletion", Ty::Bool),
];
const MANAGED_FIELDS: &[F] = &[
    f(1, "manager", Ty::Str),
    f(2, "operation", Ty::Str),
    f(3, "apiVersion", Ty::Str),
    f(4, "time", Ty::Time),
    f(6, "fieldsType", Ty::Str),
    f(7, "fieldsV1", Ty::FieldsV1),
    f(8, "subresource", Ty::Str),
];
const OBJECT_META: &[F] = &[
    f(1, "name", Ty::Str),
    f(2, "generateName", Ty::Str),
    f(3, "namespace", Ty::Str),
    f(4, "selfLink", Ty::Str),
    f(5, "uid", Ty::Str),
    f(6, "resourceVersion", Ty::Str),
    f(7, "generation", Ty::Int),
    f(8, "creationTimestamp", Ty::Time),
    f(9, "deletionTimestamp", Ty::Time),
    f(10, "deletionGracePeriodSeconds", Ty::Int),
    f(11, "labels", Ty::Map(&Ty::Str)),
    f(12, "annotations", Ty::Map(&Ty::Str)),
    r(13, "ownerReferences", Ty::Msg(OWNER_REF)),
    r(14, "finalizers", Ty::Str),
    r(17, "managedFields", Ty::Msg(MANAGED_FIELDS)),
];
const CSR_CONDITION: &[F] = &[
    f(1, "type", Ty::Str),
    f(2, "reason", Ty::Str),
    f(3, "message", Ty::Str),
    f(4, "lastUpdateTime", Ty::Time),
    f(5, "lastTransitionTime", Ty::Time),
    f(6, "status", Ty::Str),
];
const CSR: &[F] = &[
    f(1, "metadata", Ty::Msg(OBJECT_META)),
    f(
        2,
        "spec",
        Ty::Msg(&[
            f(1, "request", Ty::Bytes),
            f(2, "username", Ty::Str),
            f(3, "uid", Ty::Str),
            r(4, "groups", Ty::Str),
            r(5, "usages", Ty::Str),
            f(6, "extra", Ty::Map(&Ty::StrList)),
            f(7, "signerName", Ty::Str),
            f(8, "expirationSeconds", Ty::Int),
        ]),
    ),
    f(3, "status", Ty::Msg(&[r(1, "conditions", Ty::Msg(CSR_CONDITION)), f(2, "certificate", Ty::Bytes)])),
];
const CONFIG_MAP: &[F] = &[
    f(1, "metadata", Ty::Msg(OBJECT_META)),
    f(2, "data", Ty::Map(&Ty::Str)),
    f(3, "binaryData", Ty::Map(&Ty::Bytes)),
    f(4, "immutable", Ty::Bool),
];
const SECRET: &[F] = &[
    f(1, "metadata", Ty::Msg(OBJECT_META)),
    f(2, "data", Ty::Map(&Ty::Bytes)),
    f(3, "type", Ty::Str),
    f(4, "stringData", Ty::Map(&Ty::Str)),
    f(5, "immutable", Ty::Bool),
];
const NAMESPACE: &[F] = &[
    f(1, "metadata", Ty::Msg(OBJECT_META)),
    f(2, "spec", Ty::Msg(&[r(1, "finalizers", Ty::Str)])),
    f(3, "status", Ty::Msg(&[f(1, "phase", Ty::Str)])),
];
const OBJECT_REF: &[F] = &[
    f(1, "kind", Ty::Str),
    f(2, "namespace", Ty::Str),
    f(3, "name", Ty::Str),
    f(4, "uid", Ty::Str),
    f(5, "apiVersion", Ty::Str),
    f(6, "resourceVersion", Ty::Str),
    f(7, "fieldPath", Ty::Str),
];
const SERVICE_ACCOUNT: &[F] = &[
    f(1, "metadata", Ty::Msg(OBJECT_META)),
    r(2, "secrets", Ty::Msg(OBJECT_REF)),
    r(3, "imagePullSecrets", Ty::Msg(&[f(1, "name", Ty::Str)])),
    f(4, "automountServiceAccountToken", Ty::Bool),
];
const DELETE_OPTIONS: &[F] = &[
    f(1, "gracePeriodSeconds", Ty::Int),
    f(2, "preconditions", Ty::Msg(&[f(1, "uid", Ty::Str), f(2, "resourceVersion", Ty::Str)])),
    f(3, "orphanDependents", Ty::Bool),
    f(4, "propagationPolicy", Ty::Str),
    r(5, "dryRun", Ty::Str),
];
const EVICTION: &[F] = &[f(1, "metadata", Ty::Msg(OBJECT_META)), f(2, "deleteOptions", Ty::Msg(DELETE_OPTIONS))];

fn schema(kind: &str) -> Option<&'static [F]> {
    Some(match kind {
        "CertificateSigningRequest" => CSR,
        "ConfigMap" => CONFIG_MAP,
        "Secret" => SECRET,
        "Namespace" => NAMESPACE,
        "ServiceAccount" => SERVICE_ACCOUNT,
        "DeleteOptions" => DELETE_OPTIONS,
        "Eviction" => EVICTION,
        _ => return None,
    })
}

struct Reader<'a> {
    b: &'a [u8],
    i: usize,
}

enum Wire<'a> {
    Varint(u64),
    Len(&'a [u8]),
    Fixed,
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, ProtoError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *self.b.get(self.i).ok_or_else(|| ProtoError("truncated varint".into()))?;
            self.i += 1;
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(ProtoError("varint too long".into()))
    }

    fn next(&mut self) -> Result<Option<(u32, Wire<'a>)>, ProtoError> {
        if self.i >= self.b.len() {
            return Ok(None);
        }
        let tag = self.varint()?;
        let num = (tag >> 3) as u32;
        let wire = match tag & 7 {
            0 => Wire::Varint(self.varint()?),
            2 => {
                let n = self.varint()? as usize;
                let end = self
                    .i
                    .checked_add(n)
                    .filter(|e| *e <= self.b.len())
                    .ok_or_else(|| ProtoError("truncated field".into()))?;
                let s = &self.b[self.i..end];
                self.i = end;
                Wire::Len(s)
            }
            1 => {
                self.i += 8;
                Wire::Fixed
            }
            5 => {
                self.i += 4;
                Wire::Fixed
            }
            w => return Err(ProtoError(format!("unsupported wire type {w}"))),
        };
        Ok(Some((num, wire)))
    }
}

fn base64(b: &[u8]) -> String {
    crate::util::base64_encode(b)
}

fn value(ty: Ty, w: Wire<'_>) -> Result<Value, ProtoError> {
    Ok(match (ty, w) {
        (Ty::Str, Wire::Len(s)) => json!(String::from_utf8_lossy(s)),
        (Ty::Bytes, Wire::Len(s)) => json!(base64(s)),
        (Ty::Int, Wire::Varint(v)) => json!(v as i64),
        (Ty::Bool, Wire::Varint(v)) => json!(v != 0),
        (Ty::Time, Wire::Len(s)) => {
            let mut r = Reader { b: s, i: 0 };
            let mut secs = 0i64;
            while let Some((n, w)) = r.next()? {
                if let (1, Wire::Varint(v)) = (n, w) {
                    secs = v as i64;
                }
            }
            // The zero time is `null` in JSON (and omitted).
            if secs == 0 { Value::Null } else { json!(rfc3339(secs)) }
        }
        (Ty::FieldsV1, Wire::Len(s)) => {
            let mut r = Reader { b: s, i: 0 };
            let mut out = json!({});
            while let Some((n, w)) = r.next()? {
                if let (1, Wire::Len(raw)) = (n, w) {
                    out = serde_json::from_slice(raw).unwrap_or_else(|_| json!({}));
                }
            }
            out
        }
        (Ty::StrList, Wire::Len(s)) => {
            let mut r = Reader { b: s, i: 0 };
            let mut items = Vec::new();
            while let Some((n, w)) = r.next()? {
                if let (1, Wire::Len(v)) = (n, w) {
                    items.push(json!(String::from_utf8_lossy(v)));
                }
            }
            Value::Array(items)
        }
        (Ty::Msg(fields), Wire::Len(s)) => message(fields, s)?,
        _ => return Err(ProtoError("field of an unexpected wire type".into())),
    })
}

fn message(fields: &[F], b: &[u8]) -> Result<Value, ProtoError> {
    let mut out = Map::new();
    let mut r = Reader { b, i: 0 };
    while let Some((num, w)) = r.next()? {
        let Some(F(_, name, ty, repeated)) = fields.iter().find(|f| f.0 == num) else { continue };
        match ty {
            Ty::Map(vt) => {
                let Wire::Len(entry) = w else { return Err(ProtoError("map entry".into())) };
                let mut er = Reader { b: entry, i: 0 };
                let (mut k, mut v) = (String::new(), Value::Null);
                while let Some((n, ew)) = er.next()? {
                    match (n, ew) {
                        (1, Wire::Len(s)) => k = String::from_utf8_lossy(s).into_owned(),
                        (2, ew) => v = value(**vt, ew)?,
                        _ => {}
                    }
                }
                if v.is_null() {
                    v = match vt {
                        Ty::Str | Ty::Bytes => json!(""),
                        _ => json!([]),
                    };
                }
                let m = out.entry(name.to_string()).or_insert_with(|| json!({}));
                m[k] = v;
            }
            _ if *repeated => {
                let v = value(*ty, w)?;
                if let Value::Array(a) = out.entry(name.to_string()).or_insert_with(|| json!([])) {
                    a.push(v);
                }
            }
            _ => {
                let v = value(*ty, w)?;
                if !v.is_null() {
                    out.insert(name.to_string(), v);
                }
            }
        }
    }
    Ok(Value::Object(out))
}

/// Decodes a `application/vnd.kubernetes.protobuf` body into the object's JSON form.
pub fn decode(body: &[u8]) -> Result<Value, ProtoError> {
    let rest = body.strip_prefix(b"k8s\0").ok_or_else(|| ProtoError("missing the k8s magic prefix".into()))?;
    let mut r = Reader { b: rest, i: 0 };
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    while let Some((n, w)) = r.next()? {
        match (n, w) {
            (1, Wire::Len(tm)) => {
                let mut tr = Reader { b: tm, i: 0 };
                while let Some((tn, tw)) = tr.next()? {
                    match (tn, tw) {
                        (1, Wire::Len(s)) => api_version = String::from_utf8_lossy(s).into_owned(),
                        (2, Wire::Len(s)) => kind = String::from_utf8_lossy(s).into_owned(),
                        _ => {}
                    }
                }
            }
            (2, Wire::Len(s)) => raw = s,
            _ => {}
        }
    }
    let fields = schema(&kind).ok_or_else(|| ProtoError(format!("no protobuf schema for kind {kind:?}; send JSON")))?;
    let mut obj = message(fields, raw)?;
    obj["apiVersion"] = json!(api_version);
    obj["kind"] = json!(kind);
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn len(num: u32, b: &[u8]) -> Vec<u8> {
        let mut v = vec![((num << 3) | 2) as u8, b.len() as u8];
        v.extend_from_slice(b);
        v
    }

    #[test]
    fn configmap() {
        let meta = [len(1, b"cm"), len(11, &[len(1, b"a"), len(2, b"b")].concat())].concat();
        let entry = [len(1, b"k"), len(2, b"v")].concat();
        let raw = [len(1, &meta), len(2, &entry)].concat();
        let tm = [len(1, b"v1"), len(2, b"ConfigMap")].concat();
        let body = [b"k8s\0".to_vec(), len(1, &tm), len(2, &raw)].concat();
        let v = decode(&body).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "labels": {"a": "b"}}, "data": {"k": "v"}})
        );
    }
}
