//! Fixture parameter overrides (`--param NAME=VALUE`) for the tasks that
//! build packages.
//!
//! A package stores the fixture it was built from so that `run-package`
//! evaluates the reference on the same graph. With overrides the stored
//! text must carry the overridden values, not the file's own: otherwise a
//! package built with `--param layers=1` would be checked against the
//! fixture's 27 layers. [`resolve`] therefore returns, beside the graph,
//! the fixture text with the `params` object rewritten, and checks that
//! this text parses back to the very same graph.

use ipu_package::graph::{
    FixtureError, Graph, ParseOptions, parse_fixture, parse_fixture_for_build,
};

/// Why overrides could not be applied. [`ParamError::is_usage`] tells a
/// mistake in the command line (exit status 2) from a bad fixture.
#[derive(Debug, thiserror::Error)]
pub enum ParamError {
    /// The fixture has no parameter of that name.
    #[error("--param {name}: the fixture has no parameter `{name}`; it has: {known}")]
    Unknown {
        /// The name given.
        name: String,
        /// The fixture's parameters.
        known: String,
    },
    /// The fixture parses with its own values but not with this one.
    #[error("--param {name}={value}: the fixture rejects this value: {reason}")]
    Rejected {
        /// The parameter.
        name: String,
        /// The value given.
        value: u64,
        /// The parser's complaint.
        #[source]
        reason: FixtureError,
    },
    /// Each override alone is accepted, together they are not.
    #[error("--param {given}: the fixture rejects these values together: {reason}")]
    RejectedTogether {
        /// Every override, as `NAME=VALUE` separated by spaces.
        given: String,
        /// The parser's complaint.
        #[source]
        reason: FixtureError,
    },
    /// The same parameter is given two different values.
    #[error("parameter `{name}` is given both {first} and {second}")]
    Conflict {
        /// The parameter.
        name: String,
        /// The first value.
        first: u64,
        /// The other value.
        second: u64,
    },
    /// The fixture itself is bad (whatever the overrides).
    #[error("fixture: {0}")]
    Fixture(#[source] FixtureError),
    /// Rewriting the fixture's parameters changed the graph, or the
    /// fixture has no `params` object to rewrite.
    #[error("storing the fixture with its overrides: {0}")]
    Store(&'static str),
    /// The fixture text could not be read or written back as JSON to
    /// rewrite its parameters.
    #[error("storing the fixture with its overrides: {0}")]
    StoreJson(#[source] serde_json::Error),
    /// The fixture with its parameters rewritten does not parse.
    #[error("storing the fixture with its overrides: {0}")]
    StoreParse(#[source] FixtureError),
}

impl ParamError {
    /// Whether the command line is at fault (exit status 2), not the
    /// fixture.
    pub fn is_usage(&self) -> bool {
        !matches!(
            self,
            ParamError::Fixture(_)
                | ParamError::Store(_)
                | ParamError::StoreJson(_)
                | ParamError::StoreParse(_)
        )
    }
}

/// Parses one `NAME=VALUE` (clap's value parser for `--param`).
pub fn parse_param(text: &str) -> Result<(String, u64), String> {
    let (name, value) = text
        .split_once('=')
        .ok_or_else(|| format!("`{text}` is not NAME=VALUE"))?;
    let name = name.trim();
    if name.is_empty() {
        return Err(format!("`{text}` has no parameter name before `=`"));
    }
    let value = value.trim().parse::<u64>().map_err(|e| {
        format!("the value of parameter `{name}` is not a non-negative integer: `{value}` ({e})")
    })?;
    Ok((name.to_owned(), value))
}

/// Merges overrides in order, refusing a parameter given two different
/// values (the same value twice is harmless).
pub fn merge(overrides: &[(String, u64)]) -> Result<Vec<(String, u64)>, ParamError> {
    let mut merged: Vec<(String, u64)> = Vec::new();
    for (name, value) in overrides {
        match merged.iter().find(|(n, _)| n == name) {
            Some((_, first)) if first != value => {
                return Err(ParamError::Conflict {
                    name: name.clone(),
                    first: *first,
                    second: *value,
                });
            }
            Some(_) => {}
            None => merged.push((name.clone(), *value)),
        }
    }
    Ok(merged)
}

/// Parses `text` with `overrides` (already [`merge`]d) as a build parses
/// it (what the build cannot take is refused with the JSON path) and
/// returns the graph and the fixture text to store with the package:
/// `text` itself when there are no overrides, otherwise `text` with its
/// `params` rewritten.
pub fn resolve(text: &str, overrides: &[(String, u64)]) -> Result<(Graph, String), ParamError> {
    if overrides.is_empty() {
        let graph =
            parse_fixture_for_build(text, &ParseOptions::default()).map_err(ParamError::Fixture)?;
        return Ok((graph, text.to_owned()));
    }
    let options = ParseOptions {
        overrides: overrides.to_vec(),
    };
    let graph = match parse_fixture_for_build(text, &options) {
        Ok(graph) => graph,
        Err(FixtureError::UnknownOverride { name, known }) => {
            return Err(ParamError::Unknown { name, known });
        }
        Err(e) => return Err(blame(text, overrides, e)),
    };
    let stored = rewrite_params(text, overrides)?;
    let reparsed = parse_fixture(&stored).map_err(ParamError::StoreParse)?;
    if !same_graph(&graph, &reparsed) {
        return Err(ParamError::Store(
            "the rewritten fixture parses to a different graph",
        ));
    }
    Ok((graph, stored))
}

/// Names the override a parse failure comes from: the fixture's own values
/// are tried first (a bad fixture is not the command line's fault), then
/// each override alone.
fn blame(text: &str, overrides: &[(String, u64)], error: FixtureError) -> ParamError {
    if let Err(own) = parse_fixture_for_build(text, &ParseOptions::default()) {
        return ParamError::Fixture(own);
    }
    for (name, value) in overrides {
        let alone = ParseOptions {
            overrides: vec![(name.clone(), *value)],
        };
        if let Err(reason) = parse_fixture_for_build(text, &alone) {
            return ParamError::Rejected {
                name: name.clone(),
                value: *value,
                reason,
            };
        }
    }
    ParamError::RejectedTogether {
        given: overrides
            .iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect::<Vec<_>>()
            .join(" "),
        reason: error,
    }
}

/// `text` with `params.NAME` set to each override's value.
fn rewrite_params(text: &str, overrides: &[(String, u64)]) -> Result<String, ParamError> {
    let mut value: serde_json::Value = serde_json::from_str(text).map_err(ParamError::StoreJson)?;
    let params = value
        .get_mut("params")
        .and_then(serde_json::Value::as_object_mut)
        .ok_or(ParamError::Store("the fixture has no `params` object"))?;
    for (name, v) in overrides {
        params.insert(name.clone(), serde_json::Value::from(*v));
    }
    let mut out = serde_json::to_string_pretty(&value).map_err(ParamError::StoreJson)?;
    out.push('\n');
    Ok(out)
}

/// Whether two graphs are identical item by item.
fn same_graph(a: &Graph, b: &Graph) -> bool {
    a.name() == b.name()
        && a.repeats() == b.repeats()
        && a.tensors().len() == b.tensors().len()
        && a.ops().len() == b.ops().len()
        && a.tensors()
            .iter()
            .zip(b.tensors().iter())
            .all(|(x, y)| x.1 == y.1)
        && a.ops().iter().zip(b.ops().iter()).all(|(x, y)| x.1 == y.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MICRO: &str = include_str!("../../fixtures/micro-1l-h32.json");

    #[test]
    fn params_parse_and_refuse_clearly() {
        assert_eq!(parse_param("layers=1"), Ok(("layers".to_owned(), 1)));
        assert_eq!(parse_param(" batch = 4 "), Ok(("batch".to_owned(), 4)));
        assert!(parse_param("layers").unwrap_err().contains("NAME=VALUE"));
        assert!(parse_param("=3").unwrap_err().contains("no parameter name"));
        let e = parse_param("layers=-1").unwrap_err();
        assert!(
            e.contains("`layers`") && e.contains("non-negative integer"),
            "{e}"
        );
    }

    #[test]
    fn overrides_reach_the_stored_fixture() {
        let overrides = merge(&[("layers".to_owned(), 2), ("batch".to_owned(), 2)]).unwrap();
        let (graph, stored) = resolve(MICRO, &overrides).unwrap();
        let again = parse_fixture(&stored).unwrap();
        assert!(same_graph(&graph, &again));
        let own = parse_fixture(MICRO).unwrap();
        assert!(graph.ops().len() > own.ops().len(), "two layers, not one");
        let (_, unchanged) = resolve(MICRO, &[]).unwrap();
        assert_eq!(unchanged, MICRO);
    }

    #[test]
    fn bad_overrides_name_the_parameter() {
        let e = resolve(MICRO, &[("nope".to_owned(), 1)]).unwrap_err();
        assert!(e.is_usage());
        assert!(e.to_string().contains("`nope`"), "{e}");
        let e = resolve(MICRO, &[("batch".to_owned(), 1), ("layers".to_owned(), 0)]).unwrap_err();
        assert!(e.is_usage());
        assert!(e.to_string().starts_with("--param layers=0"), "{e}");
        let e = merge(&[("batch".to_owned(), 1), ("batch".to_owned(), 2)]).unwrap_err();
        assert!(e.is_usage() && e.to_string().contains("`batch`"), "{e}");
    }

    #[test]
    fn the_fixtures_complaint_is_kept_as_the_cause() {
        let e = resolve(MICRO, &[("layers".to_owned(), 0)]).unwrap_err();
        let cause = std::error::Error::source(&e).expect("a cause");
        assert!(cause.is::<FixtureError>(), "{e}");
        // Rewriting text that is not JSON keeps the JSON reader's error.
        let e = rewrite_params("{", &[("layers".to_owned(), 1)]).unwrap_err();
        assert!(!e.is_usage());
        assert!(
            matches!(e, ParamError::StoreJson(ref j) if j.is_eof()),
            "{e}"
        );
    }
}
