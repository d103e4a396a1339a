//! `--metrics`: records the library's metrics (see the library's `metrics` feature) for the
//! run, to print them at exit in the Prometheus text format.

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// Installs the recorder; `None` (with a warning) if another recorder is already installed.
pub(crate) fn install() -> Option<PrometheusHandle> {
    match PrometheusBuilder::new().install_recorder() {
        Ok(handle) => Some(handle),
        Err(e) => {
            eprintln!("quorumlock: --metrics: {e}");
            None
        }
    }
}
