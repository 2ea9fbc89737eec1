//! Warnings about other projects' objects: a field Kestrel does not honour (a Volcano or
//! KAI `Queue` field it does not read, a ResourceQuota scope or a LimitRange bound it
//! cannot use), or a gang whose roles see a shared volume differently. The simulator prints them; the live scheduler posts each as a Warning
//! Event on its object, once while it lasts ([`WarningBook`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// The Event reason of a [`FieldWarning`] about a field Kestrel does not honour.
pub const FIELD_NOT_HONOURED: &str = "FieldNotHonoured";
/// The Event reason of a [`FieldWarning`] about a gang's roles that mount a shared volume
/// differently ([`crate::shared_volumes`]).
pub const INCONSISTENT_VOLUMES: &str = "InconsistentVolumes";

/// The object a warning is about: what an Event's `regarding` needs.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct WarnedObject {
    pub kind: String,
    /// `None` where the reader does not know it (a parent queue named by its children).
    pub api_version: Option<String>,
    /// `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    pub name: String,
    /// `None` where the object came from a file, or is only named by others.
    pub uid: Option<String>,
}

impl WarnedObject {
    /// A Kubernetes object, as its typed struct gives it.
    pub fn of<K>(object: &K) -> WarnedObject
    where
        K: k8s_openapi::Resource + k8s_openapi::Metadata<Ty = ObjectMeta>,
    {
        let meta = object.metadata();
        WarnedObject {
            kind: K::KIND.to_string(),
            api_version: Some(K::API_VERSION.to_string()),
            namespace: meta.namespace.clone(),
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone(),
        }
    }

    /// A warning about `field` of this object.
    /// An object read untyped (a workload kind of another project), in `namespace`.
    pub fn of_value(value: &serde_json::Value, namespace: &str, name: &str) -> WarnedObject {
        let text = |pointer: &str| value.pointer(pointer).and_then(|v| v.as_str());
        WarnedObject {
            kind: text("/kind").unwrap_or_default().to_string(),
            api_version: text("/apiVersion").map(str::to_string),
            namespace: Some(namespace.to_string()),
            name: name.to_string(),
            uid: text("/metadata/uid").map(str::to_string),
        }
    }

    pub fn warning(&self, field: impl Into<String>, message: impl Into<String>) -> FieldWarning {
        FieldWarning {
            source: None,
            object: self.clone(),
            field: Some(field.into()),
            message: message.into(),
            reason: FIELD_NOT_HONOURED,
        }
    }

    /// The object as the simulator and the logs name it: `Kind namespace/name` or
    /// `Kind name`.
    pub fn label(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} {ns}/{}", self.kind, self.name),
            None => format!("{} {}", self.kind, self.name),
        }
    }

    /// (kind, namespace, name): the object whatever its version or uid.
    pub fn key(&self) -> (String, Option<String>, String) {
        (self.kind.clone(), self.namespace.clone(), self.name.clone())
    }
}

/// A field of another project's object that Kestrel does not honour, and why. Serialized
/// as its text, as the simulator prints it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FieldWarning {
    /// The file the object was read from (`cluster` for the live scheduler); `None` where
    /// the reader was given the object alone.
    pub source: Option<String>,
    pub object: WarnedObject,
    /// The field (`spec.weight`); `None` when the warning is about the object as a whole.
    pub field: Option<String>,
    pub message: String,
    /// Its Event's reason ([`FIELD_NOT_HONOURED`], [`INCONSISTENT_VOLUMES`]).
    pub reason: &'static str,
}

impl Serialize for FieldWarning {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl fmt::Display for FieldWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(source) = &self.source {
            write!(f, "{source}: ")?;
        }
        write!(f, "{}: ", self.object.label())?;
        if let Some(field) = &self.field {
            write!(f, "field {field}: ")?;
        }
        f.write_str(&self.message)
    }
}

/// The warnings said so far, per object, so that the live scheduler says each once while
/// it lasts: an object read again with the same warning is not said again; one whose
/// warning went away and came back is (so is a recreated object, whose uid differs).
#[derive(Debug, Default)]
pub struct WarningBook {
    said: BTreeMap<(String, Option<String>, String), BTreeSet<FieldWarning>>,
}

impl WarningBook {
    /// `object`'s warnings at its latest reading (replacing those of the last one).
    /// Returns those not said at the last reading.
    pub fn read(
        &mut self,
        object: (String, Option<String>, String),
        warnings: Vec<FieldWarning>,
    ) -> Vec<FieldWarning> {
        let now: BTreeSet<FieldWarning> = warnings.into_iter().collect();
        let before = self.said.remove(&object).unwrap_or_default();
        let new = now.difference(&before).cloned().collect();
        if !now.is_empty() {
            self.said.insert(object, now);
        }
        new
    }

    /// The warnings of every object at once (a full listing): objects not among them have
    /// none any more. Returns those not said before.
    pub fn read_all(&mut self, warnings: Vec<FieldWarning>) -> Vec<FieldWarning> {
        let mut by_object: BTreeMap<_, Vec<FieldWarning>> = BTreeMap::new();
        for w in warnings {
            by_object.entry(w.object.key()).or_default().push(w);
        }
        self.said.retain(|object, _| by_object.contains_key(object));
        by_object
            .into_iter()
            .flat_map(|(object, ws)| self.read(object, ws))
            .collect()
    }

    /// The warnings said about `object` at its last reading.
    pub fn said(&self, object: &(String, Option<String>, String)) -> Vec<FieldWarning> {
        self.said
            .get(object)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Drops the objects `keep` refuses (deleted ones), so their warnings are said again
    /// should they come back.
    pub fn retain(&mut self, mut keep: impl FnMut(&(String, Option<String>, String)) -> bool) {
        self.said.retain(|object, _| keep(object));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn warning(name: &str, uid: &str, field: &str) -> FieldWarning {
        FieldWarning {
            source: Some("cluster".into()),
            object: WarnedObject {
                kind: "Queue".into(),
                api_version: Some("scheduling.volcano.sh/v1beta1".into()),
                namespace: None,
                name: name.into(),
                uid: Some(uid.into()),
            },
            field: Some(field.into()),
            message: "is not read by Kestrel and has no effect".into(),
            reason: FIELD_NOT_HONOURED,
        }
    }

    #[test]
    fn the_text_names_the_source_the_object_and_the_field() {
        let mut w = warning("team", "u1", "spec.extra");
        assert_eq!(
            w.to_string(),
            "cluster: Queue team: field spec.extra: is not read by Kestrel and has no effect"
        );
        w.source = None;
        w.field = None;
        w.object.namespace = Some("ml".into());
        w.object.kind = "ResourceQuota".into();
        assert_eq!(
            w.to_string(),
            "ResourceQuota ml/team: is not read by Kestrel and has no effect"
        );
    }

    #[test]
    fn it_serializes_as_its_text() {
        let w = warning("team", "u1", "spec.extra");
        assert_eq!(serde_json::to_value(&w).unwrap(), w.to_string());
    }

    #[test]
    fn a_warning_is_said_once_while_it_lasts() {
        let mut book = WarningBook::default();
        let w = warning("team", "u1", "spec.extra");
        let key = w.object.key();
        assert_eq!(book.read(key.clone(), vec![w.clone()]), vec![w.clone()]);
        // The object changed, the warning did not.
        assert_eq!(book.read(key.clone(), vec![w.clone()]), vec![]);
        // A second warning on the same object: only it is new.
        let other = warning("team", "u1", "spec.other");
        assert_eq!(
            book.read(key.clone(), vec![w.clone(), other.clone()]),
            vec![other.clone()]
        );
        assert_eq!(book.said(&key).len(), 2);
        // Fixed, then broken again: said again.
        assert_eq!(book.read(key.clone(), vec![]), vec![]);
        assert!(book.said(&key).is_empty());
        assert_eq!(book.read(key.clone(), vec![w.clone()]), vec![w.clone()]);
        // Deleted and created again (a new uid): said again.
        let again = warning("team", "u2", "spec.extra");
        assert_eq!(book.read(key.clone(), vec![again.clone()]), vec![again]);
        // Gone: forgotten, and said again should it come back.
        book.retain(|_| false);
        assert_eq!(book.read(key, vec![w.clone()]), vec![w]);
    }

    #[test]
    fn a_full_listing_forgets_the_objects_it_lacks() {
        let mut book = WarningBook::default();
        let (a, b) = (warning("a", "ua", "spec.x"), warning("b", "ub", "spec.x"));
        assert_eq!(book.read_all(vec![a.clone(), b.clone()]).len(), 2);
        assert_eq!(book.read_all(vec![a.clone(), b.clone()]), vec![]);
        // b lost its warning (or went away): said again when it comes back; a never left.
        assert_eq!(book.read_all(vec![a.clone()]), vec![]);
        assert_eq!(book.read_all(vec![a, b.clone()]), vec![b]);
    }
}
