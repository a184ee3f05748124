use super::*;

fn git(dir: &Path, args: &[&str]) {
    let st = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .status()
        .unwrap();
    assert!(st.success(), "git {args:?}");
}

fn repo(dir: &Path) {
    fs::create_dir_all(dir.join("src")).unwrap();
    fs::write(dir.join("src/lib.rs"), "pub fn a() {}\n").unwrap();
    fs::write(dir.join("Cargo.toml"), "[package]\n").unwrap();
    fs::write(dir.join(".gitignore"), "target/\n").unwrap();
    fs::create_dir_all(dir.join("target")).unwrap();
    fs::write(dir.join("target/ignored"), "x").unwrap();
    git(dir, &["init", "-q"]);
    git(dir, &["add", "."]);
}

fn mtime(p: &Path) -> SystemTime {
    fs::metadata(p).unwrap().modified().unwrap()
}

fn scratch() -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "checkout-mtimes-{}-{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    fs::create_dir_all(&d).unwrap();
    d
}

/// A second checkout of the same content gets the first one's times (its
/// crates are fresh), and a changed file gets a time newer than any build.
#[test]
fn same_content_gets_the_recorded_time_and_a_change_a_new_one() {
    let tmp = scratch();
    let (a, b, target) = (tmp.join("a"), tmp.join("b"), tmp.join("target"));
    repo(&a);
    let lock = lock(&target).unwrap();
    let first = align(&a, &target, &lock).unwrap();
    assert_eq!((first.files, first.changed, first.first_use), (3, 3, true));
    let recorded = mtime(&a.join("src/lib.rs"));

    // Another checkout at another path, every file newer.
    std::thread::sleep(Duration::from_millis(20));
    repo(&b);
    assert!(mtime(&b.join("src/lib.rs")) > recorded);
    fs::write(b.join("Cargo.toml"), "[package]\nname = \"b\"\n").unwrap();
    let before = SystemTime::now();
    let second = align(&b, &target, &lock).unwrap();
    assert_eq!(
        (second.files, second.changed, second.first_use),
        (3, 1, false)
    );
    assert_eq!(mtime(&b.join("src/lib.rs")), recorded);
    assert!(
        mtime(&b.join("Cargo.toml")) >= before,
        "a changed file is newer than any build"
    );
    // Ignored files are neither listed nor touched.
    assert!(fs::read_to_string(target.join(MANIFEST))
        .unwrap()
        .lines()
        .all(|l| !l.contains("ignored")));

    // Back in the first checkout: its Cargo.toml differs from the manifest
    // now (b's), so it is new again although its own time was old.
    let third = align(&a, &target, &lock).unwrap();
    assert_eq!(third.changed, 1);
    assert!(mtime(&a.join("Cargo.toml")) >= before);
    assert_eq!(mtime(&a.join("src/lib.rs")), recorded);
    // An untracked, unignored file counts (a new module before `git add`).
    fs::write(a.join("src/new.rs"), "").unwrap();
    assert_eq!(align(&a, &target, &lock).unwrap().files, 4);
    fs::remove_dir_all(&tmp).unwrap();
}

/// With a build in the checkout's own target dir, times only go forward:
/// that dir may hold a crate built from other content after the recorded time.
#[test]
fn a_checkout_with_its_own_builds_only_moves_times_forward() {
    let tmp = scratch();
    let (a, b, target) = (tmp.join("a"), tmp.join("b"), tmp.join("target"));
    repo(&a);
    let lock = lock(&target).unwrap();
    align(&a, &target, &lock).unwrap();
    let recorded = mtime(&a.join("src/lib.rs"));
    std::thread::sleep(Duration::from_millis(20));
    repo(&b);
    fs::create_dir_all(b.join("target/debug/.fingerprint/xtask-launcher-1")).unwrap();
    assert!(
        align(&b, &target, &lock).unwrap().back,
        "the launcher alone is no build"
    );
    assert_eq!(mtime(&b.join("src/lib.rs")), recorded);
    fs::write(b.join("src/lib.rs"), "pub fn a() {}\n").unwrap();
    let current = mtime(&b.join("src/lib.rs"));
    fs::create_dir_all(b.join("target/debug/.fingerprint/dglrun-2")).unwrap();
    let r = align(&b, &target, &lock).unwrap();
    assert_eq!((r.back, r.changed), (false, 0));
    assert_eq!(
        mtime(&b.join("src/lib.rs")),
        current,
        "not moved back to {recorded:?}"
    );
    fs::remove_dir_all(&tmp).unwrap();
}

#[test]
fn a_manifest_line_that_does_not_parse_counts_as_changed() {
    let m = parse("00000000000000ff\t5\tsrc/lib.rs\nnot a line\nzz\t1\tx\n0a\t1\ta\tb\n");
    assert_eq!(m.len(), 2);
    assert_eq!(
        m["src/lib.rs"],
        (0xff, UNIX_EPOCH + Duration::from_nanos(5))
    );
    assert_eq!(m["a\tb"].0, 0x0a);
}

#[test]
fn not_a_git_checkout_is_an_error_naming_git() {
    let tmp = scratch();
    let target = tmp.join("target");
    let lock = lock(&target).unwrap();
    let e = align(&tmp.join("none"), &target, &lock).unwrap_err();
    assert!(e.to_string().contains("git"), "{e}");
    fs::remove_dir_all(&tmp).unwrap();
}

#[test]
fn fnv_tells_contents_and_lengths_apart() {
    assert_ne!(fnv1a(b""), fnv1a(b"\0"));
    assert_ne!(fnv1a(b"ab"), fnv1a(b"ba"));
    assert_eq!(fnv1a(b"same"), fnv1a(b"same"));
}
