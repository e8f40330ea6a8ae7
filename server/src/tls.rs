//! TLS on the client port and the replica bus (rustls, the `ring` provider), `docs/server.md`
//! "TLS". A node serves both ports with its certificate and key; on the bus, the dialler checks
//! the listener's certificate against the cluster's CA for the IP address it dialled, and the
//! bus's own handshake (the cluster key) still runs inside, so a peer needs both the key and a
//! certificate the CA signed for its address. Clients check the node's certificate the same way
//! (`iggy-server load --tls-ca`, the SDK's TLS options).
//!
//! [`generate`] makes a CA and a certificate per node (`iggy-server dev --tls`, the tests); a
//! real cluster's certificates come from the operator's own CA.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// The `[tls]` section of a node's configuration.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// This node's certificate chain (PEM), naming the IP addresses (or DNS names) clients and
    /// peers reach it at.
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
    /// The CA that signed every node's certificate (PEM): the bus's dialers check peers
    /// against it.
    pub ca: PathBuf,
    /// Serve the client port over TLS (clients must then use TLS).
    #[serde(default = "yes")]
    pub client_port: bool,
    /// Run the replica bus over TLS (every node of the cluster must).
    #[serde(default = "yes")]
    pub replica_bus: bool,
}

fn yes() -> bool {
    true
}

/// rustls over `ring`, which builds with the Rust toolchain alone (aws-lc, rustls's default,
/// builds a C library). rustls 0.23.48 marks it deprecated for want of post-quantum key
/// exchange: the classical suites (TLS 1.3 and 1.2, X25519 and the NIST curves) are what it
/// offers.
#[allow(deprecated)]
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certificates = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if certificates.is_empty() {
        return Err(format!("{}: no certificate in it", path.display()));
    }
    Ok(certificates)
}

/// The node's side of TLS, for both ports: its certificate and key. Errors name the file.
pub fn server_config(tls: &TlsConfig) -> Result<Arc<rustls::ServerConfig>, String> {
    let chain = certificates(&tls.cert)?;
    let key = PrivateKeyDer::from_pem_file(&tls.key)
        .map_err(|e| format!("{}: {e}", tls.key.display()))?;
    rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map(Arc::new)
        .map_err(|e| format!("{} and {}: {e}", tls.cert.display(), tls.key.display()))
}

/// A dialler's side: servers' certificates checked against the CA in `ca` (PEM).
pub fn client_config(ca: &Path) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for certificate in certificates(ca)? {
        roots
            .add(certificate)
            .map_err(|e| format!("{}: {e}", ca.display()))?;
    }
    Ok(Arc::new(
        rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth(),
    ))
}

/// The name a dialler checks a node's certificate for: the IP address it dialled.
pub fn server_name(ip: IpAddr) -> ServerName<'static> {
    ServerName::IpAddress(ip.into())
}

/// The files [`generate`] wrote.
#[derive(Clone, Debug)]
pub struct Generated {
    pub ca: PathBuf,
    /// Per node: its certificate and key.
    pub nodes: Vec<(PathBuf, PathBuf)>,
}

/// Writes a new CA (`ca.pem`) and, for each node, a certificate it signed for `names` (IP
/// addresses or DNS names) with its key (`NAME.pem`, `NAME.key`) into `dir`. For local
/// clusters and tests: the CA's key is not kept.
pub fn generate(dir: &Path, nodes: &[(String, Vec<String>)]) -> Result<Generated, String> {
    let fail = |e: rcgen::Error| format!("generating certificates: {e}");
    let ca_key = rcgen::KeyPair::generate().map_err(fail)?;
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(fail)?;
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "iggy-server local CA");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).map_err(fail)?;
    let ca_path = dir.join("ca.pem");
    write(&ca_path, ca.pem().as_bytes())?;
    let mut written = Vec::new();
    for (name, names) in nodes {
        let key = rcgen::KeyPair::generate().map_err(fail)?;
        let mut params = rcgen::CertificateParams::new(names.clone()).map_err(fail)?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name.as_str());
        let certificate = params.signed_by(&key, &ca).map_err(fail)?;
        let (cert_path, key_path) = (
            dir.join(format!("{name}.pem")),
            dir.join(format!("{name}.key")),
        );
        write(&cert_path, certificate.pem().as_bytes())?;
        write(&key_path, key.serialize_pem().as_bytes())?;
        owner_only(&key_path)?;
        written.push((cert_path, key_path));
    }
    Ok(Generated {
        ca: ca_path,
        nodes: written,
    })
}

/// A private key is readable by its owner alone.
#[allow(clippy::disallowed_methods)]
fn owner_only(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// A certificate or key file for a local cluster (not a node's durable file: no `Storage`).
#[allow(clippy::disallowed_methods)]
fn write(path: &Path, bytes: &[u8]) -> Result<(), String> {
    std::fs::write(path, bytes).map_err(|e| format!("{}: {e}", path.display()))
}
