//! A TCP link to the API server that a test can cut: every open connection closed at
//! once, mid-request, as a restarted load balancer or a network fault does. A request
//! whose bytes reached the API server is then carried out with its answer lost, which no
//! restart of the API server reproduces (a killed server answers nothing it did not do).

use std::sync::Arc;
use tokio::io::copy_bidirectional;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct CuttableLink {
    server: String,
    cuts: Arc<watch::Sender<u64>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for CuttableLink {
    fn drop(&mut self) {
        self.cut();
        self.task.abort();
    }
}

impl CuttableLink {
    /// Listens on loopback and forwards each connection to `upstream`
    /// (`https://127.0.0.1:PORT`). Runs on the caller's runtime.
    pub async fn start(upstream: &str) -> CuttableLink {
        let target = upstream
            .trim_start_matches("https://")
            .trim_start_matches("http://")
            .to_string();
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding a loopback port");
        let port = listener.local_addr().expect("local address").port();
        let (cuts, _) = watch::channel(0u64);
        let cuts = Arc::new(cuts);
        let sender = cuts.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let target = target.clone();
                let mut cut = sender.subscribe();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(&target).await else {
                        return;
                    };
                    // Either side closing ends the link; a cut drops both sockets.
                    tokio::select! {
                        _ = copy_bidirectional(&mut client, &mut server) => {}
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        CuttableLink {
            server: format!("https://127.0.0.1:{port}"),
            cuts,
            task,
        }
    }

    /// The address clients use instead of the API server's.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Closes every connection open now; new ones are accepted as before.
    pub fn cut(&self) {
        self.cuts.send_modify(|n| *n += 1);
    }
}
