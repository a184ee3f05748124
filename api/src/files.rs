//! The text files the operator writes into the job's ConfigMap and dglrun /
//! watcher-loop read: `hostfile`, `partfile`, `leadfile` and DGL's `ip_config`.
//!
//! Formats (one line per pod, fields separated by single spaces):
//! - hostfile: `<ip> <port> <pod> slots=<n>`, workers in partition order
//!   (index order, never string order: `worker-10` comes after `worker-9`).
//! - partfile / leadfile: `<ip> <port> <pod>`.
//!
//! The port of hostfile, partfile and leadfile lines is dglrun's agent port
//! (the launcher dials it); DGL's server port is in ip_config.
//! - ip_config: `<ip> <port>`, what DGL's `read_ip_config` accepts.
//!
//! A pod whose IP is not known yet is written with `-` as its IP.

use std::net::IpAddr;

/// A malformed line in one of the job's files.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{file}: line {line}: {message}")]
pub struct FileFormatError {
    pub file: String,
    pub line: usize,
    pub message: String,
}

/// One meaningful line of a file: its number (from 1) and its fields.
#[derive(Debug, Clone)]
pub struct Line<'a> {
    file: &'a str,
    pub number: usize,
    pub text: &'a str,
    pub fields: Vec<&'a str>,
}

impl Line<'_> {
    /// An error about this line.
    pub fn error(&self, message: String) -> FileFormatError {
        FileFormatError {
            file: self.file.to_string(),
            line: self.number,
            message,
        }
    }
}

/// Whether `#` starts a comment line (DGL's ip_config has no comments).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comments {
    Skipped,
    None,
}

/// The lines of `content` that say something: trimmed, blank lines (and,
/// with [`Comments::Skipped`], `#` lines) left out, split on white space.
/// Every parser of these files reads them so.
pub fn lines<'a>(
    file: &'a str,
    content: &'a str,
    comments: Comments,
) -> impl Iterator<Item = Line<'a>> + 'a {
    content.lines().enumerate().filter_map(move |(i, raw)| {
        let text = raw.trim();
        let comment = comments == Comments::Skipped && text.starts_with('#');
        (!text.is_empty() && !comment).then(|| Line {
            file,
            number: i + 1,
            text,
            fields: text.split_whitespace().collect(),
        })
    })
}

/// One pod in a hostfile, partfile or leadfile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostLine {
    /// The pod's IP; `None` while the pod has none.
    pub ip: Option<IpAddr>,
    pub port: u16,
    pub pod: String,
    /// Trainer slots (hostfile only).
    pub slots: Option<u32>,
}

/// Renders hostfile / partfile / leadfile content.
pub fn render_hosts(lines: &[HostLine]) -> String {
    let mut out = String::new();
    for l in lines {
        let ip = l.ip.map(|ip| ip.to_string()).unwrap_or_else(|| "-".into());
        out.push_str(&format!("{ip} {} {}", l.port, l.pod));
        if let Some(s) = l.slots {
            out.push_str(&format!(" slots={s}"));
        }
        out.push('\n');
    }
    out
}

/// Parses hostfile / partfile / leadfile content; `file` names it in errors.
pub fn parse_hosts(file: &str, content: &str) -> Result<Vec<HostLine>, FileFormatError> {
    lines(file, content, Comments::Skipped)
        .map(|l| parse_host_line(&l))
        .collect()
}

/// Parses one hostfile / partfile / leadfile line.
pub fn parse_host_line(l: &Line<'_>) -> Result<HostLine, FileFormatError> {
    let err = |message: String| l.error(message);
    let fields = &l.fields;
    if fields.len() < 3 || fields.len() > 4 {
        return Err(err(format!(
            "expected `<ip> <port> <pod> [slots=<n>]`, found {} field(s): {:?}",
            fields.len(),
            l.text
        )));
    }
    let ip = match fields[0] {
        "-" => None,
        s => Some(
            s.parse::<IpAddr>()
                .map_err(|_| err(format!("expected an IP address or `-`, found {s:?}")))?,
        ),
    };
    let port = fields[1]
        .parse::<u16>()
        .map_err(|_| err(format!("expected a port number, found {:?}", fields[1])))?;
    let slots = match fields.get(3) {
        None => None,
        Some(f) => Some(
            f.strip_prefix("slots=")
                .and_then(|n| n.parse::<u32>().ok())
                .ok_or_else(|| err(format!("expected `slots=<n>`, found {f:?}")))?,
        ),
    };
    Ok(HostLine {
        ip,
        port,
        pod: fields[2].to_string(),
        slots,
    })
}

/// Pod names listed in a file: the third field of a hostfile-style line, or
/// the only field of a line that holds just a name (what `watcher-loop` reads).
pub fn pod_names(file: &str, content: &str) -> Result<Vec<String>, FileFormatError> {
    lines(file, content, Comments::Skipped)
        .map(|l| match l.fields.len() {
            1 => Ok(l.fields[0].to_string()),
            3 | 4 => Ok(l.fields[2].to_string()),
            n => Err(l.error(format!(
                "expected a pod name or `<ip> <port> <pod> [slots=<n>]`, found {n} fields"
            ))),
        })
        .collect()
}

/// Renders DGL's ip_config: `<ip> <port>` per machine, in partition order.
pub fn render_ip_config(machines: &[(IpAddr, u16)]) -> String {
    machines
        .iter()
        .map(|(ip, port)| format!("{ip} {port}\n"))
        .collect()
}

/// Parses DGL's ip_config with DGL's own rule: `<ip>` or `<ip> <port>`
/// (default port 30050), literal IP addresses only.
pub fn parse_ip_config(file: &str, content: &str) -> Result<Vec<(IpAddr, u16)>, FileFormatError> {
    lines(file, content, Comments::None)
        .map(|l| parse_ip_config_line(&l))
        .collect()
}

fn parse_ip_config_line(l: &Line<'_>) -> Result<(IpAddr, u16), FileFormatError> {
    let fields = &l.fields;
    if fields.len() > 2 {
        return Err(l.error(format!(
            "expected `<ip>` or `<ip> <port>` (DGL accepts 1 or 2 columns), found {} fields",
            fields.len()
        )));
    }
    let ip = fields[0].parse::<IpAddr>().map_err(|_| {
        l.error(format!(
            "expected a literal IP address (DGL matches it against local interfaces), found {:?}",
            fields[0]
        ))
    })?;
    let port = match fields.get(1) {
        None => crate::names::DGL_SERVER_PORT,
        Some(p) => p
            .parse::<u16>()
            .map_err(|_| l.error(format!("expected a port number, found {p:?}")))?,
    };
    Ok((ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostfile_round_trips_in_index_order() {
        let lines: Vec<HostLine> = (0..12)
            .map(|i| HostLine {
                ip: if i == 3 {
                    None
                } else {
                    Some(format!("10.0.0.{i}").parse().unwrap())
                },
                port: 30050,
                pod: format!("j-worker-{i}"),
                slots: Some(2),
            })
            .collect();
        let text = render_hosts(&lines);
        assert!(text.starts_with("10.0.0.0 30050 j-worker-0 slots=2\n"));
        assert!(text.contains("- 30050 j-worker-3 slots=2\n"));
        assert_eq!(parse_hosts("hostfile", &text).unwrap(), lines);
        let names = pod_names("hostfile", &text).unwrap();
        assert_eq!(names[10], "j-worker-10");
    }

    #[test]
    fn bad_lines_name_file_line_and_expectation() {
        let e = parse_hosts("hostfile", "10.0.0.1 30050 a\nnot-an-ip 1 b\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.to_string().starts_with("hostfile: line 2:"), "{e}");
        assert!(e.message.contains("IP address"));
        let e = parse_hosts("partfile", "1.2.3.4 99999 p").unwrap_err();
        assert!(e.message.contains("port"), "{e}");
        let e = parse_hosts("hostfile", "1.2.3.4 1 p cores=2").unwrap_err();
        assert!(e.message.contains("slots="), "{e}");
    }

    #[test]
    fn ip_config_follows_dgls_rule() {
        let parsed = parse_ip_config("ip_config", "10.1.0.1\n10.1.0.2 40000\n").unwrap();
        assert_eq!(parsed[0].1, 30050);
        assert_eq!(parsed[1].1, 40000);
        assert_eq!(
            render_ip_config(&parsed),
            "10.1.0.1 30050\n10.1.0.2 40000\n"
        );
        let e = parse_ip_config("ip_config", "10.1.0.1 30050 extra").unwrap_err();
        assert!(e.message.contains("1 or 2 columns"));
        let e = parse_ip_config("ip_config", "worker-0 30050").unwrap_err();
        assert!(e.message.contains("literal IP"));
    }

    #[test]
    fn pod_names_accept_bare_names() {
        assert_eq!(pod_names("f", "a\n\n# c\nb\n").unwrap(), vec!["a", "b"]);
        assert!(pod_names("f", "a b").is_err());
    }
}
