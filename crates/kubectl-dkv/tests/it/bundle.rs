//! What the tests read in a support bundle (`kubectl dkv report`).

use std::path::Path;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams};

use dkv_test_support as support;

/// Every file in a `.tar.gz`, with its content.
pub fn read_bundle(path: &Path) -> Vec<(String, Vec<u8>)> {
    use std::io::Read;
    let file = std::fs::File::open(path).unwrap();
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
    archive
        .entries()
        .unwrap()
        .map(|entry| {
            let mut entry = entry.unwrap();
            let name = entry.path().unwrap().to_string_lossy().into_owned();
            let mut body = Vec::new();
            entry.read_to_end(&mut body).unwrap();
            (name, body)
        })
        .collect()
}

/// Fails if any value of any Secret in `ns` (in any of the encodings a
/// leak could take) appears anywhere in the bundle.
pub async fn assert_no_secret_value(
    client: &kube::Client,
    ns: &str,
    entries: &[(String, Vec<u8>)],
) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let needles: Vec<String> = secrets
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .flat_map(|secret| {
            // The scan's own needles (private key lines, passwords, tokens)
            // and every other value long enough to be a credential (an
            // encryption key, an access key); certificates are public.
            let long_values = secret.data.iter().flatten().filter_map(|(_, value)| {
                let value = String::from_utf8_lossy(&value.0);
                (value.len() >= 16 && !value.contains("-----BEGIN")).then(|| value.into_owned())
            });
            support::secret_scan::needles(secret)
                .into_iter()
                .chain(long_values)
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        !needles.is_empty(),
        "the namespace holds secret values to look for"
    );
    let everything: Vec<u8> = entries.iter().flat_map(|(_, body)| body.clone()).collect();
    let everything = String::from_utf8_lossy(&everything);
    for needle in &needles {
        assert!(
            !everything.contains(needle.as_str()),
            "a secret value is in the report"
        );
    }
}
