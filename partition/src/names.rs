//! Names that become file names. Type, feature and graph names come from
//! untrusted input (metadata.json, a text schema, a job's flags) and some
//! end up in a path (`<ntype>.txt`, `<graph>.json`, the staging folder):
//! each must be one path component, checked where it is parsed and again
//! where a file is named after it. Messages say which field and what was
//! expected, never the name itself (it is file content).

use std::fmt;

/// Longest name accepted, in bytes: with the suffixes the pipeline adds
/// (`.json.rank<r>.tmp`, `.partial-<pid>`) it stays under the 255 bytes a
/// Linux file name may have.
pub const MAX_NAME_BYTES: usize = 200;

/// A name that is safe as one path component: non-empty, at most
/// [`MAX_NAME_BYTES`] bytes, without `/`, `\`, NUL or control characters,
/// and neither `.` nor `..`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Name(String);

/// Why a string is not a [`Name`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("an empty name")]
    Empty,
    #[error("a name of {0} bytes (at most {MAX_NAME_BYTES})")]
    TooLong(usize),
    #[error("a name containing '/' or '\\'")]
    Separator,
    #[error("a name containing NUL or a control character")]
    Control,
    #[error("the name \".\" or \"..\"")]
    Dots,
}

/// What a [`Name`] must be, for messages.
pub const EXPECTED: &str = "expected a name usable as one file name: 1 to 200 bytes, without \
                            '/', '\\', NUL or control characters, not \".\" or \"..\"";

impl Name {
    /// Checks `s`.
    pub fn parse(s: &str) -> Result<Name, NameError> {
        check(s)?;
        Ok(Name(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }

    /// `<name>.<ext>`: still one path component.
    pub fn file(&self, ext: &str) -> String {
        format!("{}.{ext}", self.0)
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Whether `s` is a valid [`Name`], and if not why.
pub fn check(s: &str) -> Result<(), NameError> {
    if s.is_empty() {
        return Err(NameError::Empty);
    }
    if s.len() > MAX_NAME_BYTES {
        return Err(NameError::TooLong(s.len()));
    }
    if s.contains(['/', '\\']) {
        return Err(NameError::Separator);
    }
    if s.chars().any(char::is_control) {
        return Err(NameError::Control);
    }
    if s == "." || s == ".." {
        return Err(NameError::Dots);
    }
    Ok(())
}

/// The config error of a name `field` (e.g. `node type 0`) that is not a
/// [`Name`].
pub(crate) fn config_error(field: &str, e: NameError) -> crate::Error {
    crate::Error::Config(format!("{field}: found {e}; {EXPECTED}"))
}

/// Checks `name` as `field`, as a config error.
pub(crate) fn check_config(field: &str, name: &str) -> crate::Result<()> {
    check(name).map_err(|e| config_error(field, e))
}

/// Checks every type, relation and feature name of `g`.
pub(crate) fn check_graph(g: &crate::model::InputGraph) -> crate::Result<()> {
    for (i, t) in g.ntypes.iter().enumerate() {
        check_config(&format!("node type {i}"), &t.name)?;
        for f in t.data.keys() {
            check_config(&format!("a feature of node type {i}"), f)?;
        }
    }
    for (e, t) in g.etypes.iter().enumerate() {
        check_config(&format!("edge type {e}'s relation"), &t.rel)?;
        for f in t.data.keys() {
            check_config(&format!("a feature of edge type {e}"), f)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_single_components_pass() {
        for ok in ["paper", "paper:cites:paper", "a.b", "..a", "名前", "_N0"] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
        let long = "x".repeat(MAX_NAME_BYTES + 1);
        let cases = [
            ("", NameError::Empty),
            ("../../../escape", NameError::Separator),
            ("a/b", NameError::Separator),
            ("a\\b", NameError::Separator),
            ("/abs", NameError::Separator),
            ("a\0b", NameError::Control),
            ("a\nb", NameError::Control),
            (".", NameError::Dots),
            ("..", NameError::Dots),
            (long.as_str(), NameError::TooLong(MAX_NAME_BYTES + 1)),
        ];
        for (bad, why) in cases {
            assert_eq!(check(bad), Err(why), "{bad:?}");
        }
        assert_eq!(Name::parse("t").unwrap().file("txt"), "t.txt");
    }

    #[test]
    fn messages_do_not_repeat_the_name() {
        let e = config_error("node type 0", check("../secret-value").unwrap_err());
        let m = e.to_string();
        assert!(
            m.starts_with("node type 0: found a name containing '/'"),
            "{m}"
        );
        assert!(!m.contains("secret-value"), "{m}");
    }
}
