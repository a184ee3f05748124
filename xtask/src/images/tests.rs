use super::*;

/// Every file the training image's Dockerfile copies from examples/ is
/// in its content hash, and every hashed file exists.
#[test]
fn the_training_image_hash_covers_what_it_copies() {
    let root = std::path::Path::new(
        &std::env::var_os("CARGO_MANIFEST_DIR")
            .expect("cargo sets CARGO_MANIFEST_DIR when it runs a test"),
    )
    .join("..");
    let dockerfile = std::fs::read_to_string(root.join("examples/graphsage/Dockerfile")).unwrap();
    let copied: Vec<&str> = dockerfile
        .lines()
        .filter(|l| l.starts_with("COPY examples/"))
        .flat_map(|l| l.split_whitespace().skip(1))
        .filter(|w| w.starts_with("examples/"))
        .collect();
    assert!(copied.len() >= 6, "{copied:?}");
    for f in &copied {
        assert!(
            TRAINING_IMAGE_FILES.contains(f),
            "{f} is copied but not hashed"
        );
    }
    for f in TRAINING_IMAGE_FILES {
        assert!(root.join(f).is_file(), "{f} does not exist");
    }
}

/// The repository files a Dockerfile's COPY instructions name
/// (continuation lines joined; the destination is not under examples/).
fn copied_from_examples(dockerfile: &str) -> Vec<String> {
    dockerfile
        .replace("\\\n", " ")
        .lines()
        .filter(|l| l.starts_with("COPY "))
        .flat_map(|l| l.split_whitespace().skip(1))
        .filter(|w| w.starts_with("examples/"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn copied_files_span_continuation_lines() {
    let df = "COPY examples/a.py examples/b.json \\\n     examples/c.yaml /opt/x/\nRUN true\n";
    assert_eq!(
        copied_from_examples(df),
        ["examples/a.py", "examples/b.json", "examples/c.yaml"]
    );
}

/// Every file the GraphStorm Dockerfile copies is in its content hash,
/// and every hashed file exists.
#[test]
fn the_graphstorm_image_hash_covers_what_it_copies() {
    let root = std::path::Path::new(
        &std::env::var_os("CARGO_MANIFEST_DIR")
            .expect("cargo sets CARGO_MANIFEST_DIR when it runs a test"),
    )
    .join("..");
    let dockerfile = std::fs::read_to_string(root.join("examples/graphstorm/Dockerfile")).unwrap();
    let copied = copied_from_examples(&dockerfile);
    assert_eq!(copied.len(), GRAPHSTORM_IMAGE_FILES.len(), "{copied:?}");
    for f in &copied {
        assert!(
            GRAPHSTORM_IMAGE_FILES.contains(&f.as_str()),
            "{f} is copied but not hashed"
        );
    }
    for f in GRAPHSTORM_IMAGE_FILES {
        assert!(root.join(f).is_file(), "{f} does not exist");
    }
}
