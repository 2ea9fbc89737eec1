//! DeviceTaintRule (`resource.k8s.io/v1`, GA in Kubernetes 1.37): a taint put on published
//! DRA devices from outside their ResourceSlices, by an admin or a health agent. The type
//! is Kestrel's own because the API types Kestrel builds against (1.34) serve the rule only
//! as `v1alpha3`, with another selector; the fields read here are those of `v1`.

use k8s_openapi::api::resource::v1::DeviceTaint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

/// A DeviceTaintRule as the API serves it (its status, the eviction controller's, is not
/// read).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct DeviceTaintRule {
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: DeviceTaintRuleSpec,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceTaintRuleSpec {
    /// The devices tainted; absent: every device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_selector: Option<DeviceTaintSelector>,
    pub taint: DeviceTaint,
}

/// Which devices a rule taints: each field set narrows it (driver, pool, device name).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceTaintSelector {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
}

impl k8s_openapi::Resource for DeviceTaintRule {
    const API_VERSION: &'static str = "resource.k8s.io/v1";
    const GROUP: &'static str = "resource.k8s.io";
    const KIND: &'static str = "DeviceTaintRule";
    const VERSION: &'static str = "v1";
    const URL_PATH_SEGMENT: &'static str = "devicetaintrules";
    type Scope = k8s_openapi::ClusterResourceScope;
}

impl k8s_openapi::Metadata for DeviceTaintRule {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}
