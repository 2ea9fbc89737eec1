//! A small MLflow tracking client over its REST API (`/api/2.0/mlflow/...`), on the
//! HTTP/1 client already in the dependency tree: one connection per request, plain
//! `http://` (a tracking server inside the cluster), a timeout on each call.

use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use std::time::Duration;

/// How long one call may take, connection included.
pub const TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum MlflowError {
    #[error("MLflow at {uri} is unreachable: {why}")]
    Unreachable { uri: String, why: String },
    #[error("MLflow at {uri} answered {status} to {call}: {body}")]
    Refused {
        uri: String,
        call: String,
        status: u16,
        body: String,
    },
}

#[derive(Debug, Clone)]
pub struct Mlflow {
    uri: String,
    /// `host:port`.
    authority: String,
    /// Path prefix of the server (`/mlflow` for `http://host/mlflow`), without a trailing
    /// slash.
    prefix: String,
}

impl Mlflow {
    /// A client for `uri` (`http://host[:port][/prefix]`, checked by
    /// [`kestrel_objects::training::check_tracking_uri`]).
    pub fn new(uri: &str) -> Result<Mlflow, String> {
        kestrel_objects::training::check_tracking_uri(uri)?;
        let rest = &uri["http://".len()..];
        let (host, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let authority = if host.contains(':') {
            host.to_string()
        } else {
            format!("{host}:80")
        };
        Ok(Mlflow {
            uri: uri.trim_end_matches('/').to_string(),
            authority,
            prefix: match prefix.trim_end_matches('/') {
                "" => String::new(),
                p => format!("/{p}"),
            },
        })
    }

    pub fn uri(&self) -> &str {
        &self.uri
    }

    async fn call(
        &self,
        method: Method,
        api: &str,
        body: Option<Value>,
    ) -> Result<Value, MlflowError> {
        let path = format!("{}/api/2.0/mlflow/{api}", self.prefix);
        let unreachable = |why: String| MlflowError::Unreachable {
            uri: self.uri.clone(),
            why,
        };
        let exchange = async {
            let stream = tokio::net::TcpStream::connect(&self.authority)
                .await
                .map_err(|e| unreachable(e.to_string()))?;
            let (mut sender, connection) =
                hyper::client::conn::http1::handshake(TokioIo::new(stream))
                    .await
                    .map_err(|e| unreachable(e.to_string()))?;
            tokio::spawn(connection);
            let body = body.map(|b| b.to_string()).unwrap_or_default();
            let request = Request::builder()
                .method(method)
                .uri(&path)
                .header(http::header::HOST, &self.authority)
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(Full::new(Bytes::from(body)))
                .map_err(|e| unreachable(e.to_string()))?;
            let response = sender
                .send_request(request)
                .await
                .map_err(|e| unreachable(e.to_string()))?;
            let status = response.status();
            let bytes = response
                .into_body()
                .collect()
                .await
                .map_err(|e| unreachable(e.to_string()))?
                .to_bytes();
            Ok::<_, MlflowError>((status, bytes))
        };
        let (status, bytes) = tokio::time::timeout(TIMEOUT, exchange)
            .await
            .map_err(|_| unreachable(format!("no answer within {}s", TIMEOUT.as_secs())))??;
        let text = String::from_utf8_lossy(&bytes).to_string();
        if status != StatusCode::OK {
            return Err(MlflowError::Refused {
                uri: self.uri.clone(),
                call: api.to_string(),
                status: status.as_u16(),
                body: text.chars().take(300).collect(),
            });
        }
        Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// The experiment's id, created if missing.
    pub async fn experiment(&self, name: &str) -> Result<String, MlflowError> {
        let query = format!("experiments/get-by-name?experiment_name={}", percent(name));
        match self.call(Method::GET, &query, None).await {
            Ok(v) => return Ok(id(&v["experiment"]["experiment_id"])),
            Err(MlflowError::Refused { status: 404, .. }) => {}
            Err(e) => return Err(e),
        }
        let created = self
            .call(
                Method::POST,
                "experiments/create",
                Some(json!({"name": name})),
            )
            .await?;
        Ok(id(&created["experiment_id"]))
    }

    /// A new run; its id.
    pub async fn create_run(
        &self,
        experiment_id: &str,
        run_name: &str,
        start_ms: i64,
        tags: &[(String, String)],
    ) -> Result<String, MlflowError> {
        let tags: Vec<Value> = tags
            .iter()
            .map(|(k, v)| json!({"key": k, "value": v}))
            .collect();
        let run = self
            .call(
                Method::POST,
                "runs/create",
                Some(json!({"experiment_id": experiment_id, "run_name": run_name,
                            "start_time": start_ms, "tags": tags})),
            )
            .await?;
        Ok(id(&run["run"]["info"]["run_id"]))
    }

    /// Params (each key once per run), tags and metrics (`(key, value, step)`) at `at_ms`.
    pub async fn log_batch(
        &self,
        run_id: &str,
        params: &[(String, String)],
        tags: &[(String, String)],
        metrics: &[(String, f64, i64)],
        at_ms: i64,
    ) -> Result<(), MlflowError> {
        let kv = |items: &[(String, String)]| -> Vec<Value> {
            items
                .iter()
                .map(|(k, v)| json!({"key": k, "value": v}))
                .collect()
        };
        let metrics: Vec<Value> = metrics
            .iter()
            .map(|(k, v, step)| json!({"key": k, "value": v, "timestamp": at_ms, "step": step}))
            .collect();
        self.call(
            Method::POST,
            "runs/log-batch",
            Some(json!({"run_id": run_id, "params": kv(params), "tags": kv(tags), "metrics": metrics})),
        )
        .await
        .map(|_| ())
    }

    /// Ends the run: `FINISHED` or `FAILED`.
    pub async fn end_run(
        &self,
        run_id: &str,
        status: &str,
        end_ms: i64,
    ) -> Result<(), MlflowError> {
        self.call(
            Method::POST,
            "runs/update",
            Some(json!({"run_id": run_id, "status": status, "end_time": end_ms})),
        )
        .await
        .map(|_| ())
    }
}

fn id(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Percent-encodes a query value.
fn percent(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_split_into_authority_and_prefix() {
        let m = Mlflow::new("http://mlflow.ml:5000/").unwrap();
        assert_eq!(
            (m.authority.as_str(), m.prefix.as_str()),
            ("mlflow.ml:5000", "")
        );
        let m = Mlflow::new("http://tracking/mlflow").unwrap();
        assert_eq!(
            (m.authority.as_str(), m.prefix.as_str()),
            ("tracking:80", "/mlflow")
        );
        assert!(Mlflow::new("https://x")
            .unwrap_err()
            .contains("https is not supported"));
        assert!(Mlflow::new("http://x:port")
            .unwrap_err()
            .contains("not a port"));
        assert_eq!(percent("team a/b"), "team%20a%2Fb");
    }

    #[tokio::test]
    async fn a_closed_port_reads_as_unreachable() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let m = Mlflow::new(&format!("http://127.0.0.1:{port}")).unwrap();
        let e = m.experiment("x").await.unwrap_err().to_string();
        assert!(
            e.contains("unreachable") && e.contains(&port.to_string()),
            "{e}"
        );
    }
}
