//! A TCP link to the API server that a test can cut: every open connection closed at
//! once, mid-request, as a restarted load balancer or a network fault does. A request
//! whose bytes reached the API server is then carried out with its answer lost, which no
//! restart of the API server reproduces (a killed server answers nothing it did not do).
//! It can also be slow: every byte delivered a set time after it was sent, each way, as
//! over a link to a far region (latency, not a lower bandwidth).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

pub struct CuttableLink {
    server: String,
    cuts: Arc<watch::Sender<u64>>,
    /// The delay each way, in microseconds.
    latency: Arc<AtomicU64>,
    connections: Arc<AtomicUsize>,
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
        let latency = Arc::new(AtomicU64::new(0));
        let connections = Arc::new(AtomicUsize::new(0));
        let (sender, delay, count) = (cuts.clone(), latency.clone(), connections.clone());
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::Relaxed);
                let (target, delay) = (target.clone(), delay.clone());
                let mut cut = sender.subscribe();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(&target).await else {
                        return;
                    };
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    // Each direction ends as its sender closes; a cut drops both sockets.
                    let both = async {
                        tokio::join!(
                            forward(client_read, server_write, delay.clone()),
                            forward(server_read, client_write, delay)
                        )
                    };
                    tokio::select! {
                        _ = both => {}
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        CuttableLink {
            server: format!("https://127.0.0.1:{port}"),
            cuts,
            latency,
            connections,
            task,
        }
    }

    /// Delays every byte by `each_way` in both directions from now on (zero: none).
    pub fn set_latency(&self, each_way: Duration) {
        let micros = u64::try_from(each_way.as_micros()).unwrap_or(u64::MAX);
        self.latency.store(micros, Ordering::Relaxed);
    }

    /// The connections opened through the link so far.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::Relaxed)
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

/// Copies `from` to `to`, each chunk written `latency` after it was read; chunks read
/// meanwhile queue behind it, so the delay adds no wait per chunk (the link keeps its
/// bandwidth). Ends when either side closes.
async fn forward(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    latency: Arc<AtomicU64>,
) {
    let (chunks, mut delivered) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let reading = async move {
        let mut buffer = vec![0u8; 64 * 1024];
        while let Ok(n @ 1..) = from.read(&mut buffer).await {
            let due = Instant::now() + Duration::from_micros(latency.load(Ordering::Relaxed));
            if chunks.send((due, buffer[..n].to_vec())).is_err() {
                break;
            }
        }
    };
    let writing = async move {
        while let Some((due, chunk)) = delivered.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&chunk).await.is_err() {
                break;
            }
        }
        let _ = to.shutdown().await;
    };
    // Reading ends at end of input; what was read is still delivered, then the writer
    // closes its side.
    tokio::join!(reading, writing);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `chunks` pings written, then their echoes read: how long it took.
    async fn round_trip(socket: &mut TcpStream, chunks: usize) -> Duration {
        let started = Instant::now();
        for _ in 0..chunks {
            socket.write_all(b"ping").await.unwrap();
        }
        let mut answer = vec![0u8; 4 * chunks];
        socket.read_exact(&mut answer).await.unwrap();
        started.elapsed()
    }

    /// An echo server behind the link: a round trip takes the latency twice, and many
    /// chunks in flight take it once, not once each.
    #[tokio::test]
    async fn latency_delays_each_way_and_keeps_the_bandwidth() {
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let upstream = format!("http://{}", echo.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((socket, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let (mut read, mut write) = socket.into_split();
                    let _ = tokio::io::copy(&mut read, &mut write).await;
                });
            }
        });
        let link = CuttableLink::start(&upstream).await;
        let address = link.server().trim_start_matches("https://").to_string();
        let mut socket = TcpStream::connect(&address).await.unwrap();
        assert!(round_trip(&mut socket, 1).await < Duration::from_millis(100));
        link.set_latency(Duration::from_millis(150));
        let slow = round_trip(&mut socket, 1).await;
        assert!(slow >= Duration::from_millis(300), "{slow:?}");
        let many = round_trip(&mut socket, 20).await;
        assert!(many < Duration::from_millis(1500), "{many:?}");
        assert_eq!(link.connections(), 1);
    }
}
