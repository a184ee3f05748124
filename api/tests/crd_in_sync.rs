//! The committed CRD must be exactly what the code generates.
#[test]
fn committed_crd_matches_generated() {
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR")
        .expect("cargo sets CARGO_MANIFEST_DIR when it runs a test");
    let path = format!("{manifest_dir}/../crds/dgljobs.yaml");
    let committed = std::fs::read_to_string(&path).expect("crds/dgljobs.yaml is readable");
    assert!(
        committed == dgl_api::crd_yaml(),
        "crds/dgljobs.yaml is out of date with the DGLJob types: regenerate it with \
         `cargo run -p dgl-operator -- crd > crds/dgljobs.yaml`"
    );
}
