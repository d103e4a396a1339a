//! `--cacert`, `--cert` and `--key`: the certificates of TLS voters (`rediss://`,
//! `rediss+cluster://`, `rediss+sentinel://`), spelled as redis-cli and etcdctl spell them, and
//! given to every voter: to the library's connections and to this command's own.
//!
//! The files are read while the command line is parsed, so that one that cannot be read (or
//! holds no PEM) is a usage error (exit 2) naming it, before any master is asked anything.

use std::fmt;
use std::path::PathBuf;

use quorumlock::RedlockBuilder;

/// The options that trust a private CA and present a client certificate.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct TlsArgs {
    /// Trust this CA's certificate (PEM) for TLS voters (rediss://, rediss+cluster://,
    /// rediss+sentinel://) instead of the system's roots, like redis-cli --cacert.
    #[arg(long, env = "QUORUMLOCK_CACERT", value_name = "FILE", value_parser = read_pem)]
    cacert: Option<Pem>,
    /// Present this client certificate (PEM) to TLS voters that require one (mutual TLS,
    /// tls-auth-clients yes); with --key.
    #[arg(
        long,
        env = "QUORUMLOCK_CERT",
        value_name = "FILE",
        value_parser = read_pem,
        requires = "key"
    )]
    cert: Option<Pem>,
    /// The private key (PEM) of the --cert client certificate; with --cert.
    #[arg(
        long,
        env = "QUORUMLOCK_KEY",
        value_name = "FILE",
        value_parser = read_pem,
        requires = "cert"
    )]
    key: Option<Pem>,
}

/// A PEM file's contents, and its path. `Debug` shows the path only: a key's contents are a
/// secret.
#[derive(Clone)]
pub(crate) struct Pem {
    path: PathBuf,
    // Read only with the `tls` feature; without it, no file is ever accepted.
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    contents: Vec<u8>,
}

impl fmt::Debug for Pem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pem")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// Reads a PEM file, or says why it cannot be used, naming it.
fn read_pem(path: &str) -> Result<Pem, String> {
    if !cfg!(feature = "tls") {
        return Err(format!(
            "{path}: this quorumlock was built without TLS (build it with `--features tls`)"
        ));
    }
    let contents = std::fs::read(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    if !contents
        .windows(b"-----BEGIN ".len())
        .any(|w| w == b"-----BEGIN ")
    {
        return Err(format!("{path} holds no PEM (no \"-----BEGIN \" line)"));
    }
    Ok(Pem {
        path: PathBuf::from(path),
        contents,
    })
}

impl TlsArgs {
    /// `builder` with these certificates, for every TLS voter.
    pub(crate) fn apply(&self, builder: RedlockBuilder) -> RedlockBuilder {
        #[cfg(feature = "tls")]
        {
            let mut builder = builder;
            if let Some(ca) = &self.cacert {
                builder = builder.tls_root_certificate(ca.contents.clone());
            }
            if let (Some(cert), Some(key)) = (&self.cert, &self.key) {
                builder =
                    builder.tls_client_certificate(cert.contents.clone(), key.contents.clone());
            }
            builder
        }
        #[cfg(not(feature = "tls"))]
        builder
    }

    /// The certificates as the Redis client takes them, for this command's own connections:
    /// the system's roots and no client certificate when none was given.
    #[cfg(feature = "tls")]
    pub(crate) fn certificates(&self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: match (&self.cert, &self.key) {
                (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
                    client_cert: cert.contents.clone(),
                    client_key: key.contents.clone(),
                }),
                _ => None,
            },
            root_cert: self.cacert.as_ref().map(|ca| ca.contents.clone()),
        }
    }
}
