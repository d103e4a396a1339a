//! The signals that ask `exec` to stop: SIGTERM (`kill`, supervisors, `docker stop`), SIGHUP,
//! SIGQUIT and SIGINT. Once listened for, they no longer end the process: `exec` stops the
//! command first, then releases the lock, then exits.

use std::io;

use nix::sys::signal::Signal;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;

/// What has been received so far.
#[derive(Debug, Clone, Copy, Default)]
struct Received {
    count: u64,
    last: Option<Signal>,
}

/// The termination signals received by this process. Clones see the same signals, each at its
/// own pace.
#[derive(Debug, Clone)]
pub(crate) struct Termination {
    received: watch::Receiver<Received>,
}

impl Termination {
    /// Starts listening. From now on these signals are counted instead of ending the process.
    ///
    /// # Errors
    ///
    /// A handler cannot be installed.
    pub(crate) fn listen() -> io::Result<Termination> {
        let (tx, received) = watch::channel(Received::default());
        for sig in [
            Signal::SIGTERM,
            Signal::SIGHUP,
            Signal::SIGQUIT,
            Signal::SIGINT,
        ] {
            let mut stream = signal(SignalKind::from_raw(sig as i32))?;
            let tx = tx.clone();
            tokio::spawn(async move {
                while stream.recv().await.is_some() {
                    tx.send_modify(|r| {
                        r.count += 1;
                        r.last = Some(sig);
                    });
                }
            });
        }
        Ok(Termination { received })
    }

    /// How many signals have arrived so far, and the last one.
    pub(crate) fn received(&self) -> (u64, Option<Signal>) {
        let r = *self.received.borrow();
        (r.count, r.last)
    }

    /// Waits until more than `seen` signals have arrived; returns the new count and the last
    /// signal.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is consumed; call it again with the same `seen`.
    pub(crate) async fn after(&mut self, seen: u64) -> (u64, Signal) {
        match self.received.wait_for(|r| r.count > seen).await {
            Ok(r) => (r.count, r.last.unwrap_or(Signal::SIGTERM)),
            // The senders live in tasks that never end while the runtime runs.
            Err(_) => std::future::pending().await,
        }
    }
}
