//! The S3 test server (`localkube::s3::S3Server`): SeaweedFS built from the
//! Go module proxy and cached (this test builds it when it is missing, as
//! the test command's setup does), started on free ports, with identities
//! that do what they say and no anonymous access.

use std::io::{Read, Write};
use std::net::TcpStream;

use localkube::s3::S3Server;
use localkube::GoTool;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStoreExt, PutPayload};

/// A plain, unsigned GET: what anonymous access would be.
fn anonymous_get(endpoint: &str, path: &str) -> String {
    let addr = endpoint.trim_start_matches("http://");
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text
}

#[test]
fn seaweedfs_serves_s3_with_its_identities_and_nothing_anonymous() {
    let weed =
        localkube::ensure_tool(GoTool::SeaweedFs).expect("weed builds from the Go module proxy");
    assert_eq!(localkube::installed_tool(GoTool::SeaweedFs), Some(weed));
    let s3 = S3Server::start(&["bkt"]).unwrap_or_else(|e| panic!("{e}"));
    println!(
        "weed server -s3 answered in {:.2}s, {} MiB resident",
        s3.start_time.as_secs_f64(),
        s3.rss_bytes().unwrap_or(0) >> 20
    );
    s3.put("bkt", "dir/x.bin", vec![7u8; 1000]).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let key = ObjectPath::from("dir/x.bin");

    // The reader reads, by range too, and cannot write.
    let reader = s3.store("bkt", &s3.reader).unwrap();
    let got = rt.block_on(reader.get_range(&key, 10..20)).unwrap();
    assert_eq!(&got[..], &[7u8; 10]);
    let put = rt.block_on(reader.put(&ObjectPath::from("y"), PutPayload::from_static(b"no")));
    assert!(put.is_err(), "the reader must not write");

    // The outsider and the anonymous are refused.
    let outsider = s3.store("bkt", &s3.outsider).unwrap();
    let e = rt.block_on(outsider.head(&key)).unwrap_err().to_string();
    assert!(e.contains("403"), "{e}");
    let text = anonymous_get(s3.endpoint(), "/bkt/dir/x.bin");
    assert!(text.starts_with("HTTP/1.1 403"), "{text}");
    assert!(text.contains("AccessDenied"), "{text}");

    // The credentials are not printed by Debug.
    let shown = format!("{:?}", s3.reader);
    assert!(!shown.contains(&s3.reader.secret_key), "{shown}");
}
