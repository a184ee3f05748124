//! Bad input, held to figures (issue #15): random bytes and random
//! line-shaped text through the wire frame decoder and the hostfile /
//! ip_config / pod-name parsers. None may panic; a refused file names its
//! file and a line that exists and says something. Bounded: a few thousand
//! cases in all, well under a second each.

use dgl_api::files::{self, FileFormatError};
use dgl_api::wire::{self, Request, Response, FRAME_HEADER_LEN, MAX_FRAME_LEN};
use proptest::prelude::*;

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// The error names `file` and a line of `content` that is not blank.
fn names_a_real_line(e: &FileFormatError, file: &str, content: &str) {
    let text = e.to_string();
    assert!(
        text.starts_with(&format!("{file}: line {}: ", e.line)),
        "{text}"
    );
    let line = content
        .lines()
        .nth(e.line - 1)
        .unwrap_or_else(|| panic!("line {} does not exist: {text}", e.line));
    assert!(!line.trim().is_empty(), "a blank line blamed: {text}");
}

/// Text made of lines of plausible and implausible fields.
fn host_like_text() -> impl Strategy<Value = String> {
    let field = prop_oneof![
        Just("10.0.0.1".to_string()),
        Just("::1".to_string()),
        Just("-".to_string()),
        Just("30049".to_string()),
        Just("99999".to_string()),
        Just("slots=4".to_string()),
        Just("slots=x".to_string()),
        Just("#".to_string()),
        "[a-z0-9.-]{0,12}",
        any::<String>(),
    ];
    let line = prop::collection::vec(field, 0..6).prop_map(|f| f.join(" "));
    prop::collection::vec(line, 0..8).prop_map(|l| l.join("\n"))
}

proptest! {
    #![proptest_config(config(1500))]

    #[test]
    fn frames_of_random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        if bytes.len() >= FRAME_HEADER_LEN {
            let header: [u8; FRAME_HEADER_LEN] = bytes[..FRAME_HEADER_LEN].try_into().unwrap();
            match wire::frame_len(header) {
                Ok(len) => prop_assert!(len <= MAX_FRAME_LEN),
                Err(e) => prop_assert!(e.to_string().contains("exceeds the limit")),
            }
        }
        let _ = wire::decode_body::<Request>(&bytes);
        let _ = wire::decode_body::<Response>(&bytes);
    }

    #[test]
    fn json_shaped_frames_never_panic(
        kind in prop_oneof![
            prop::sample::select(vec!["fetch", "manifest", "file", "start", "chunk_sums"]).prop_map(String::from),
            "[a-z_]{0,10}",
        ],
        body in "[{}\\[\\]\":,0-9a-z_ -]{0,80}",
    ) {
        let text = format!("{{\"type\":\"{kind}\",{body}");
        let _ = wire::decode_body::<Request>(text.as_bytes());
        let _ = wire::decode_body::<Response>(text.as_bytes());
    }

    #[test]
    fn hostfiles_never_panic_and_errors_name_the_line(text in host_like_text()) {
        if let Err(e) = files::parse_hosts("hostfile", &text) {
            names_a_real_line(&e, "hostfile", &text);
        }
        if let Err(e) = files::pod_names("leadfile", &text) {
            names_a_real_line(&e, "leadfile", &text);
        }
    }

    #[test]
    fn ip_configs_never_panic_and_errors_name_the_line(text in host_like_text()) {
        match files::parse_ip_config("ip_config", &text) {
            Ok(machines) => prop_assert!(machines.len() <= text.lines().count()),
            Err(e) => names_a_real_line(&e, "ip_config", &text),
        }
    }

    #[test]
    fn arbitrary_text_never_panics_the_parsers(text in any::<String>()) {
        for r in [
            files::parse_hosts("f", &text).map(|_| ()),
            files::parse_ip_config("f", &text).map(|_| ()),
            files::pod_names("f", &text).map(|_| ()),
        ] {
            if let Err(e) = r {
                names_a_real_line(&e, "f", &text);
            }
        }
    }
}
