//! Installing Kestrel as a platform team would: `kestrel crds` and `kestrel manifests`
//! applied server-side, then a kubeconfig holding a token of the ServiceAccount those
//! manifests create, so `kestrel serve` runs with exactly the RBAC it ships.

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::{self, Scope};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Field manager of the objects the tests apply.
const MANAGER: &str = "kestrel-testenv";

/// Applies every document of a multi-document YAML text by server-side apply (a dry run
/// when `dry_run`), resolving kinds through discovery and waiting for CRDs applied
/// earlier in the text to be served. Errors name the object.
pub async fn apply_yaml(client: &kube::Client, text: &str, dry_run: bool) -> Result<(), String> {
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(text).map_err(|e| format!("the YAML does not parse: {e}"))?;
    for doc in docs.into_iter().filter(|d| d.is_object()) {
        let api_version = doc["apiVersion"].as_str().unwrap_or_default().to_string();
        let kind = doc["kind"].as_str().unwrap_or_default().to_string();
        let name = doc["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let what = format!("{kind} {name} ({api_version})");
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g.to_string(), v.to_string()),
            None => (String::new(), api_version.clone()),
        };
        let gvk = GroupVersionKind::gvk(&group, &version, &kind);
        let mut resolved = None;
        for _ in 0..100 {
            match discovery::pinned_kind(client, &gvk).await {
                Ok(r) => {
                    resolved = Some(r);
                    break;
                }
                // A CRD applied just before may take a moment to be served.
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        let (resource, caps) = resolved.ok_or_else(|| format!("{what}: kind not served"))?;
        let object: DynamicObject =
            serde_json::from_value(doc.clone()).map_err(|e| format!("{what}: {e}"))?;
        let api: Api<DynamicObject> = match caps.scope {
            Scope::Namespaced => {
                let ns = doc["metadata"]["namespace"].as_str().unwrap_or("default");
                Api::namespaced_with(client.clone(), ns, &resource)
            }
            Scope::Cluster => Api::all_with(client.clone(), &resource),
        };
        let mut params = PatchParams::apply(MANAGER).force();
        params.dry_run = dry_run;
        api.patch(&name, &params, &Patch::Apply(&object))
            .await
            .map_err(|e| format!("{what}: {e}"))?;
    }
    Ok(())
}

/// What [`install_kestrel`] made.
pub struct Installed {
    /// A kubeconfig with the `kestrel` ServiceAccount's token.
    pub kubeconfig: PathBuf,
    pub namespace: String,
}

/// Applies `kestrel crds` and `kestrel manifests` (from the `kestrel` binary at `kestrel`)
/// and writes a kubeconfig for the ServiceAccount they create into `dir`.
pub async fn install_kestrel(
    client: &kube::Client,
    server: &str,
    kestrel: &Path,
    dir: &Path,
) -> Installed {
    for args in [&["crds"][..], &["manifests"][..]] {
        let out = std::process::Command::new(kestrel)
            .args(args)
            .output()
            .expect("running kestrel");
        assert!(out.status.success(), "kestrel {args:?} failed");
        let text = String::from_utf8(out.stdout).expect("UTF-8 manifests");
        apply_yaml(client, &text, false)
            .await
            .unwrap_or_else(|e| panic!("applying `kestrel {}`: {e}", args.join(" ")));
    }
    let namespace = "kube-system".to_string();
    let token = service_account_token(client, &namespace, "kestrel").await;
    let kubeconfig = dir.join("kestrel-sa.kubeconfig");
    std::fs::write(&kubeconfig, token_kubeconfig(server, &token)).expect("writing kubeconfig");
    Installed {
        kubeconfig,
        namespace,
    }
}

/// A token for a ServiceAccount (TokenRequest API, one hour).
pub async fn service_account_token(client: &kube::Client, namespace: &str, name: &str) -> String {
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let request: TokenRequest = serde_json::from_value(serde_json::json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600},
    }))
    .expect("TokenRequest");
    let answer: TokenRequest = api
        .create_subresource("token", name, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| {
            panic!("requesting a token for ServiceAccount {namespace}/{name}: {e}")
        });
    answer
        .status
        .and_then(|s| s.token)
        .expect("TokenRequest status.token")
}

/// A kubeconfig for `server` with a bearer token.
pub fn token_kubeconfig(server: &str, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: testenv\n  cluster:\n    server: {server}\n    insecure-skip-tls-verify: true\nusers:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: testenv\n  context:\n    cluster: testenv\n    user: u\ncurrent-context: testenv\n"
    )
}
