//! Talking to the kubelet over its Unix sockets: registering the device plugin, and asking
//! PodResources which pod holds which GPU.

use crate::proto::deviceplugin::registration_client::RegistrationClient;
use crate::proto::deviceplugin::{DevicePluginOptions, RegisterRequest};
use crate::proto::podresources::pod_resources_lister_client::PodResourcesListerClient;
use crate::proto::podresources::ListPodResourcesRequest;
use hyper_util::rt::TokioIo;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};
use tower::service_fn;

/// The device plugin API version the agent speaks.
pub const API_VERSION: &str = "v1beta1";
/// The kubelet's registration socket, in the device plugin directory.
pub const KUBELET_SOCKET: &str = "kubelet.sock";
pub const DEFAULT_DEVICE_PLUGIN_DIR: &str = "/var/lib/kubelet/device-plugins";
pub const DEFAULT_POD_RESOURCES_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";

#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    #[error("cannot connect to {path}: {error}")]
    Connect { path: PathBuf, error: String },
    #[error("{call} on {path}: {status}")]
    Call {
        call: &'static str,
        path: PathBuf,
        status: Box<tonic::Status>,
    },
}

/// A gRPC channel over a Unix socket (the URI is unused; tonic needs one).
pub async fn channel(path: &Path) -> Result<Channel, KubeletError> {
    let socket = path.to_path_buf();
    Endpoint::from_static("http://kubelet.local")
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(10))
        .connect_with_connector(service_fn(move |_: Uri| {
            let socket = socket.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(socket).await?)) }
        }))
        .await
        .map_err(|e| KubeletError::Connect {
            path: path.to_path_buf(),
            error: format!(
                "{e}: {}",
                std::error::Error::source(&e)
                    .map(|s| s.to_string())
                    .unwrap_or_default()
            ),
        })
}

/// Registers a device plugin serving `endpoint` (a socket file name in the kubelet's
/// device plugin directory) for `resource_name`.
pub async fn register(
    kubelet_socket: &Path,
    endpoint: &str,
    resource_name: &str,
) -> Result<(), KubeletError> {
    let mut client = RegistrationClient::new(channel(kubelet_socket).await?);
    client
        .register(RegisterRequest {
            version: API_VERSION.into(),
            endpoint: endpoint.into(),
            resource_name: resource_name.into(),
            options: Some(DevicePluginOptions {
                pre_start_required: false,
                get_preferred_allocation_available: true,
            }),
        })
        .await
        .map_err(|status| KubeletError::Call {
            call: "Register",
            path: kubelet_socket.to_path_buf(),
            status: Box::new(status),
        })?;
    Ok(())
}

/// Who holds a device, per the kubelet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub namespace: String,
    pub pod: String,
    pub container: String,
}

/// Device ID (GPU UUID) -> the container it is allocated to, for `resource_name`.
pub async fn device_holders(
    socket: &Path,
    resource_name: &str,
) -> Result<BTreeMap<String, Holder>, KubeletError> {
    let mut client = PodResourcesListerClient::new(channel(socket).await?);
    let list = client
        .list(ListPodResourcesRequest {})
        .await
        .map_err(|status| KubeletError::Call {
            call: "List",
            path: socket.to_path_buf(),
            status: Box::new(status),
        })?
        .into_inner();
    let mut out = BTreeMap::new();
    for pod in list.pod_resources {
        for c in pod.containers {
            for d in c
                .devices
                .iter()
                .filter(|d| d.resource_name == resource_name)
            {
                for id in &d.device_ids {
                    out.insert(
                        id.clone(),
                        Holder {
                            namespace: pod.namespace.clone(),
                            pod: pod.name.clone(),
                            container: c.name.clone(),
                        },
                    );
                }
            }
        }
    }
    Ok(out)
}

/// Whether `name` is a resource name a device plugin may register: `domain/name`, the
/// domain a DNS subdomain outside `kubernetes.io`, the name a qualified name part.
pub fn check_resource_name(name: &str) -> Result<(), String> {
    let hint = "write it as domain/name, e.g. nvidia.com/gpu";
    let (domain, local) = name
        .split_once('/')
        .ok_or_else(|| format!("resource name {name:?} has no domain; {hint}"))?;
    let dns_label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if domain.len() > 253 || !domain.contains('.') || !domain.split('.').all(dns_label) {
        return Err(format!(
            "resource name {name:?}: {domain:?} is not a DNS domain; {hint}"
        ));
    }
    if domain == "kubernetes.io" || domain.ends_with(".kubernetes.io") {
        return Err(format!(
            "resource name {name:?}: the kubernetes.io domain is reserved for Kubernetes; {hint}"
        ));
    }
    let ok_local = !local.is_empty()
        && local.len() <= 63
        && local
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && local.starts_with(|c: char| c.is_ascii_alphanumeric())
        && local.ends_with(|c: char| c.is_ascii_alphanumeric());
    if !ok_local {
        return Err(format!(
            "resource name {name:?}: {local:?} is not a valid name (letters, digits, '-', '_', '.', \
             starting and ending with a letter or digit); {hint}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_names() {
        check_resource_name("nvidia.com/gpu").unwrap();
        check_resource_name("example.com/gpu-h100").unwrap();
        assert!(check_resource_name("gpu")
            .unwrap_err()
            .contains("no domain"));
        assert!(check_resource_name("kubernetes.io/gpu")
            .unwrap_err()
            .contains("reserved"));
        assert!(check_resource_name("nvidia/gpu")
            .unwrap_err()
            .contains("DNS domain"));
        assert!(check_resource_name("nvidia.com/-gpu")
            .unwrap_err()
            .contains("not a valid name"));
        assert!(check_resource_name("Nvidia.com/gpu").is_err());
    }
}
