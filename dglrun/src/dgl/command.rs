//! Commands as DGL users write them (DGL's `tools/launch.py` convention):
//! the user's whole command line as one string, split into words as a
//! shell would (quotes, backslashes; no variables, globs or pipes), with
//! `{name}` placeholders that dglrun fills. Nothing is appended.
//!
//! `{{` and `}}` stand for literal braces. A placeholder dglrun does not
//! know, or one it has no value for in this job, is an error that names it
//! and the flag, before any process starts.

use std::fmt;

/// Why a command line cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    #[error("{flag}: cannot split {line:?} into words: a quote is not closed")]
    Split { flag: &'static str, line: String },
    #[error("{flag}: the command is empty")]
    Empty { flag: &'static str },
    #[error("{flag}: unknown placeholder {{{name}}} in {word:?}; known placeholders: {known} (write {{{{ and }}}} for literal braces)")]
    Unknown {
        flag: &'static str,
        name: String,
        word: String,
        known: String,
    },
    #[error("{flag}: placeholder {{{name}}} has no value here: {why}")]
    Unavailable {
        flag: &'static str,
        name: String,
        why: String,
    },
    #[error("{flag}: unmatched brace in {word:?} (write {{{{ and }}}} for literal braces)")]
    Brace { flag: &'static str, word: String },
    #[error("{flag}: {message}")]
    Shape { flag: &'static str, message: String },
}

/// The value of one placeholder in one situation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Text(String),
    /// Known, but without a value here; the text says why.
    Missing(String),
}

impl Value {
    pub fn of(v: impl fmt::Display) -> Value {
        Value::Text(v.to_string())
    }

    /// A value from an optional flag: missing names the flag.
    pub fn from_flag<T: fmt::Display>(v: Option<T>, flag: &str) -> Value {
        match v {
            Some(v) => Value::of(v),
            None => Value::Missing(format!("{flag} was not given")),
        }
    }
}

/// The placeholders of one command and their values.
pub type Values = Vec<(&'static str, Value)>;

/// A user's command line: the flag it came from and its words, unfilled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pub flag: &'static str,
    pub words: Vec<String>,
}

impl Template {
    /// Splits `line` into words as a POSIX shell would.
    pub fn parse(flag: &'static str, line: &str) -> Result<Template, CommandError> {
        let words = shlex::split(line).ok_or_else(|| CommandError::Split {
            flag,
            line: line.to_string(),
        })?;
        if words.is_empty() {
            return Err(CommandError::Empty { flag });
        }
        Ok(Template { flag, words })
    }

    /// The words with every placeholder replaced by its value.
    pub fn fill(&self, values: &Values) -> Result<Vec<String>, CommandError> {
        fill_words(self.flag, &self.words, values)
    }
}

/// Fills the placeholders of `words` from `values`.
pub fn fill_words(
    flag: &'static str,
    words: &[String],
    values: &Values,
) -> Result<Vec<String>, CommandError> {
    words.iter().map(|w| fill_word(flag, w, values)).collect()
}

fn fill_word(flag: &'static str, word: &str, values: &Values) -> Result<String, CommandError> {
    let brace = || CommandError::Brace {
        flag,
        word: word.to_string(),
    };
    let mut out = String::with_capacity(word.len());
    let mut rest = word;
    while let Some(i) = rest.find(['{', '}']) {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if let Some(t) = tail.strip_prefix("{{").or_else(|| tail.strip_prefix("}}")) {
            out.push_str(&tail[..1]);
            rest = t;
            continue;
        }
        if tail.starts_with('}') {
            return Err(brace());
        }
        let end = tail.find('}').ok_or_else(brace)?;
        let name = &tail[1..end];
        out.push_str(&lookup(flag, name, word, values)?);
        rest = &tail[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn lookup(
    flag: &'static str,
    name: &str,
    word: &str,
    values: &Values,
) -> Result<String, CommandError> {
    match values.iter().find(|(n, _)| *n == name) {
        Some((_, Value::Text(v))) => Ok(v.clone()),
        Some((_, Value::Missing(why))) => Err(CommandError::Unavailable {
            flag,
            name: name.to_string(),
            why: why.clone(),
        }),
        None => Err(CommandError::Unknown {
            flag,
            name: name.to_string(),
            word: word.to_string(),
            known: values
                .iter()
                .map(|(n, _)| format!("{{{n}}}"))
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

/// A training command must start with the Python interpreter, followed by
/// the script or `-m module`: the trainers run as `<python> -m
/// torch.distributed.run <its options> <the rest>`, as launch.py does it.
/// Returns the script's path, if the command names one.
pub fn python_script<'w>(
    flag: &'static str,
    words: &'w [String],
) -> Result<Option<&'w str>, CommandError> {
    let program = words[0].rsplit('/').next().unwrap_or_default();
    if !program.starts_with("python") {
        return Err(CommandError::Shape {
            flag,
            message: format!(
                "the command must start with the Python interpreter (as with DGL's launch.py), e.g. `python3 train.py ...`; it starts with {:?}",
                words[0]
            ),
        });
    }
    match words.get(1).map(String::as_str) {
        Some("-m") if words.len() > 2 => Ok(None),
        Some(w) if !w.starts_with('-') => Ok(Some(w)),
        other => Err(CommandError::Shape {
            flag,
            message: format!(
                "after the interpreter comes the script or `-m <module>` (the trainers run as `{} -m torch.distributed.run ... <script>`), not {}",
                words[0],
                other.map_or("nothing".to_string(), |w| format!("{w:?}"))
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values() -> Values {
        vec![
            ("ip_config", Value::of("/w/ip_config")),
            ("graph_name", Value::of("products")),
            ("num_trainers", Value::of(2)),
            ("num_epochs", Value::from_flag(None::<u32>, "--num-epochs")),
        ]
    }

    #[test]
    fn splits_like_a_shell_and_fills_placeholders() {
        let t = Template::parse(
            "--train-command",
            r#"python3 train.py --graph_name {graph_name} --ip_config={ip_config} --note "a b" 'x{{y}}' --n {num_trainers}"#,
        )
        .unwrap();
        assert_eq!(t.words.len(), 10);
        let w = t.fill(&values()).unwrap();
        assert_eq!(
            w,
            [
                "python3",
                "train.py",
                "--graph_name",
                "products",
                "--ip_config=/w/ip_config",
                "--note",
                "a b",
                "x{y}",
                "--n",
                "2"
            ]
        );
    }

    #[test]
    fn a_value_is_never_split_again() {
        let v = vec![("graph_name", Value::of("a b"))];
        let t = Template::parse("--train-command", "python3 t.py {graph_name}").unwrap();
        assert_eq!(t.fill(&v).unwrap(), ["python3", "t.py", "a b"]);
    }

    #[test]
    fn unknown_and_unavailable_placeholders_are_refused_by_name() {
        let t = Template::parse("--train-command", "python3 t.py --x {ipconfig}").unwrap();
        let e = t.fill(&values()).unwrap_err().to_string();
        assert!(
            e.starts_with("--train-command: unknown placeholder {ipconfig}"),
            "{e}"
        );
        assert!(e.contains("{ip_config}, {graph_name}"), "{e}");
        let t = Template::parse("--partition-command", "python3 t.py {num_epochs}").unwrap();
        let e = t.fill(&values()).unwrap_err().to_string();
        assert_eq!(
            e,
            "--partition-command: placeholder {num_epochs} has no value here: --num-epochs was not given"
        );
    }

    #[test]
    fn malformed_lines_are_refused() {
        let e = Template::parse("--train-command", "python3 'train.py").unwrap_err();
        assert!(matches!(e, CommandError::Split { .. }), "{e}");
        let e = Template::parse("--train-command", "   ").unwrap_err();
        assert_eq!(
            e,
            CommandError::Empty {
                flag: "--train-command"
            }
        );
        for bad in ["python3 t.py {graph_name", "python3 t.py graph}"] {
            let t = Template::parse("--train-command", bad).unwrap();
            let e = t.fill(&values()).unwrap_err();
            assert!(matches!(e, CommandError::Brace { .. }), "{bad}: {e}");
        }
    }

    #[test]
    fn a_training_command_starts_with_python_and_a_script() {
        let words = |s: &str| Template::parse("--train-command", s).unwrap().words;
        let f = "--train-command";
        assert_eq!(
            python_script(f, &words("python3 a/train.py --x")).unwrap(),
            Some("a/train.py")
        );
        assert_eq!(
            python_script(f, &words("/opt/venv/bin/python -m pkg.train")).unwrap(),
            None
        );
        for bad in [
            "bash run.sh",
            "python3 -u train.py",
            "python3",
            "python3 -m",
        ] {
            let e = python_script(f, &words(bad)).unwrap_err().to_string();
            assert!(e.starts_with("--train-command: "), "{bad}: {e}");
        }
    }
}
