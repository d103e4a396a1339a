//! Certificates for TLS test servers: a throw-away certificate authority made with the `openssl`
//! command, a server certificate for `127.0.0.1` and `localhost` signed by it, a client
//! certificate signed by it (for mutual TLS), and an unrelated CA (for a client that trusts the
//! wrong one).
//!
//! A server takes them through [`ServerTls`](crate::server::ServerTls) and
//! [`RedisServerBuilder::tls`](crate::RedisServerBuilder::tls); clusters and Sentinel groups whose
//! server builder has TLS run their cluster bus, replication and Sentinel links over TLS too.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

use crate::server::ServerTls;

/// The CA's certificate, in [`TestCa::dir`].
pub const CA_CERT: &str = "ca.crt";
/// The server certificate (for `IP:127.0.0.1` and `DNS:localhost`), signed by the CA.
pub const SERVER_CERT: &str = "server.crt";
/// The server certificate's private key.
pub const SERVER_KEY: &str = "server.key";
/// A client certificate (`extendedKeyUsage=clientAuth`), signed by the CA.
pub const CLIENT_CERT: &str = "client.crt";
/// The client certificate's private key.
pub const CLIENT_KEY: &str = "client.key";
/// Another CA's certificate, which signed none of the above.
pub const OTHER_CA_CERT: &str = "other-ca.crt";

/// A throw-away certificate authority and the certificates it signed, in a temporary directory
/// removed when this is dropped. Certificates are valid for one day.
///
/// ```no_run
/// use quorumlock_testkit::tls::TestCa;
/// use quorumlock_testkit::RedisServer;
///
/// let ca = TestCa::generate()?;
/// let server = RedisServer::builder().tls(ca.server_tls().plain_port(false)).spawn()?;
/// let url = server.tls_url().unwrap(); // "rediss://127.0.0.1:PORT"
/// let trusted = ca.read(quorumlock_testkit::tls::CA_CERT)?; // for tls_root_certificate
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct TestCa {
    dir: TempDir,
}

impl fmt::Debug for TestCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestCa")
            .field("dir", &self.dir.path())
            .finish()
    }
}

impl TestCa {
    /// Makes the CA, the other CA, and the server and client certificates (P-256 keys).
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::NotFound`] if the `openssl` command cannot be run (the message says which
    /// package has it); any other error with `openssl`'s output if a step fails.
    pub fn generate() -> io::Result<TestCa> {
        let dir = tempfile::Builder::new()
            .prefix("quorumlock-pki-")
            .tempdir()?;
        let ca = TestCa { dir };
        for name in ["ca", "other-ca"] {
            ca.openssl(&[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-days",
                "1",
                "-subj",
                &format!("/CN=quorumlock test {name}"),
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.crt"),
            ])?;
        }
        std::fs::write(
            ca.path("server.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
        )?;
        std::fs::write(ca.path("client.ext"), "extendedKeyUsage=clientAuth\n")?;
        for leaf in ["server", "client"] {
            ca.openssl(&[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-subj",
                &format!("/CN=quorumlock test {leaf}"),
                "-keyout",
                &format!("{leaf}.key"),
                "-out",
                &format!("{leaf}.csr"),
            ])?;
            ca.openssl(&[
                "x509",
                "-req",
                "-in",
                &format!("{leaf}.csr"),
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "1",
                "-extfile",
                &format!("{leaf}.ext"),
                "-out",
                &format!("{leaf}.crt"),
            ])?;
        }
        Ok(ca)
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The path of file `name` ([`CA_CERT`], [`SERVER_CERT`], ...).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The contents of file `name` (PEM).
    ///
    /// # Errors
    ///
    /// If it cannot be read.
    pub fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        std::fs::read(self.path(name))
    }

    /// A server's TLS settings with this CA's server certificate, trusting this CA for client
    /// certificates (which are not required: see [`ServerTls::auth_clients`]), with the plain
    /// port kept (see [`ServerTls::plain_port`]).
    pub fn server_tls(&self) -> ServerTls {
        ServerTls::new(
            self.path(SERVER_CERT),
            self.path(SERVER_KEY),
            self.path(CA_CERT),
        )
    }

    fn openssl(&self, args: &[&str]) -> io::Result<()> {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .map_err(|error| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!(
                        "cannot run openssl ({error}); the TLS tests need it (Debian package \
                         `openssl`)"
                    ),
                )
            })?;
        if out.status.success() {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "openssl {args:?} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )))
        }
    }
}
