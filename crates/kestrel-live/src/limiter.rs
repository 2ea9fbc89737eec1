//! Client-side rate limiting of API writes (`--qps`, `--burst`), a token bucket as
//! client-go's.

use std::sync::Mutex;
use tokio::time::{Duration, Instant};

#[derive(Debug)]
pub struct Limiter {
    qps: f64,
    burst: f64,
    bucket: Mutex<(f64, Instant)>,
}

impl Limiter {
    /// `qps <= 0` disables the limit.
    pub fn new(qps: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        Limiter {
            qps,
            burst,
            bucket: Mutex::new((burst, Instant::now())),
        }
    }

    pub fn unlimited() -> Self {
        Limiter::new(0.0, 1)
    }

    /// Waits for a token.
    pub async fn acquire(&self) {
        if self.qps <= 0.0 {
            return;
        }
        loop {
            let wait = {
                let mut b = self.bucket.lock().expect("limiter lock");
                let now = Instant::now();
                let (tokens, last) = *b;
                let tokens =
                    (tokens + now.duration_since(last).as_secs_f64() * self.qps).min(self.burst);
                if tokens >= 1.0 {
                    *b = (tokens - 1.0, now);
                    return;
                }
                *b = (tokens, now);
                Duration::from_secs_f64((1.0 - tokens) / self.qps)
            };
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn burst_then_qps() {
        let l = Limiter::new(10.0, 5);
        let start = Instant::now();
        for _ in 0..5 {
            l.acquire().await;
        }
        assert_eq!(Instant::now(), start, "the burst is free");
        for _ in 0..10 {
            l.acquire().await;
        }
        let took = Instant::now() - start;
        assert!(
            took >= Duration::from_millis(990) && took <= Duration::from_millis(1010),
            "{took:?}"
        );
    }
}
