//! A TCP link in front of PostgreSQL that a test can cut, as a database
//! server stopped hard looks to its clients: connections in flight drop and
//! new ones are closed at once, until the link is restored.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::net::TcpStream;
use tokio::task::AbortHandle;

pub struct DatabaseLink {
    port: u16,
    upstream: String,
    cut: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<AbortHandle>>>,
}

impl DatabaseLink {
    /// A link to the server `url` names (`postgres://user@host:port/db`).
    pub async fn to(url: &str) -> Self {
        let upstream = authority(url).to_owned();
        let listener = crate::support::bot::listen_on_a_free_port().await;
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let open: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let (is_cut, conns, to) = (cut.clone(), open.clone(), upstream.clone());
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if is_cut.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let to = to.clone();
                let task = tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(&to).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                conns.lock().unwrap().push(task.abort_handle());
            }
        });
        Self {
            port,
            upstream,
            cut,
            open,
        }
    }

    /// `url` with its server replaced by this link.
    pub fn url_for(&self, url: &str) -> String {
        url.replacen(&self.upstream, &format!("127.0.0.1:{}", self.port), 1)
    }

    /// The database goes away: every connection drops, new ones close.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for task in self.open.lock().unwrap().drain(..) {
            task.abort();
        }
    }

    pub fn restore(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

fn authority(url: &str) -> &str {
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    let host_part = after_scheme.split('/').next().unwrap_or(after_scheme);
    host_part
        .rsplit_once('@')
        .map_or(host_part, |(_, host)| host)
}
