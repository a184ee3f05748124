//! The committed CRD must be exactly what the code generates.
#[test]
fn committed_crd_matches_generated() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../crds/dgljobs.yaml");
    let committed = std::fs::read_to_string(path).expect("crds/dgljobs.yaml is readable");
    assert!(
        committed == dgl_api::crd_yaml(),
        "crds/dgljobs.yaml is out of date with the DGLJob types: regenerate it with \
         `cargo run -p dgl-operator -- crd > crds/dgljobs.yaml`"
    );
}
