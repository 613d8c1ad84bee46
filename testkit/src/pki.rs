//! A throwaway PKI for TLS tests (rcgen): a CA, server certificates for DNS
//! names and IP addresses, client certificates carrying a SPIFFE URI, as PEM
//! text or written to files.

use std::path::Path;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
    SanType,
};

/// A self-signed certificate authority.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    /// A new CA named `common_name`, allowed to sign certificates and CRLs
    /// (Go's verifier, kube-apiserver's among them, wants both usages).
    pub fn new(common_name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        let key = KeyPair::generate().expect("CA key");
        Self {
            issuer: CertifiedIssuer::self_signed(params, key).expect("CA certificate"),
        }
    }

    /// The CA's certificate, PEM.
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// Writes the CA's certificate to `path`.
    pub fn write(&self, path: &Path) {
        write(path, &self.pem());
    }

    /// A certificate for `names` (DNS names or IP addresses, told apart as
    /// rcgen does), its first name as the common name.
    pub fn server(&self, names: &[&str]) -> Leaf {
        let mut params =
            CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
                .expect("server certificate parameters");
        if let Some(first) = names.first() {
            params.distinguished_name.push(DnType::CommonName, *first);
        }
        self.sign(params)
    }

    /// A client certificate whose only name is the URI `identity` (a
    /// SPIFFE ID such as `spiffe://cluster.local/ns/x/sa/y`).
    pub fn client(&self, identity: &str) -> Leaf {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("client parameters");
        params.subject_alt_names = vec![SanType::URI(
            identity.try_into().expect("an IA5 identity URI"),
        )];
        self.sign(params)
    }

    fn sign(&self, params: CertificateParams) -> Leaf {
        let key = KeyPair::generate().expect("leaf key");
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("leaf certificate");
        Leaf {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }
}

/// A certificate and its private key, PEM.
#[derive(Clone, Debug)]
pub struct Leaf {
    /// The certificate.
    pub cert: String,
    /// The private key (PKCS#8).
    pub key: String,
}

impl Leaf {
    /// A self-signed certificate for `names`, for tests that need a valid
    /// certificate and no chain.
    pub fn self_signed(names: &[&str]) -> Self {
        let key = KeyPair::generate().expect("key");
        let cert =
            CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
                .expect("certificate parameters")
                .self_signed(&key)
                .expect("self-signed certificate");
        Self {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }

    /// Writes the certificate to `cert` and the key to `key`.
    pub fn write(&self, cert: &Path, key: &Path) {
        write(cert, &self.cert);
        write(key, &self.key);
    }

    /// Writes `<dir>/<name>.pem` and `<dir>/<name>-key.pem`, the names the
    /// tests' configurations use.
    pub fn write_pem(&self, dir: &Path, name: &str) {
        self.write(
            &dir.join(format!("{name}.pem")),
            &dir.join(format!("{name}-key.pem")),
        );
    }
}

/// A new private key (ECDSA P-256): `(private PKCS#8, public SPKI)`, PEM.
pub fn key_pair() -> (String, String) {
    let key = KeyPair::generate().expect("key");
    (key.serialize_pem(), key.public_key_pem())
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}
