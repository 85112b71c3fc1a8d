//! Label selectors, in the Kubernetes style: `k=v`, `k!=v`, `k in (a,b)`,
//! `k notin (a)`, `k`, `!k`, joined by commas; every requirement must hold.
//! Nothing nests, so only the length needs a bound.

use std::collections::{BTreeSet, HashMap};

use crate::error::{ParseError, quote};

/// The longest selector accepted, in bytes of UTF-8.
pub const MAX_SELECTOR_BYTES: usize = crate::limits::SELECTOR_BYTES.max;

/// One requirement of a selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Exists(String),
    NotExists(String),
    In(String, BTreeSet<String>),
    NotIn(String, BTreeSet<String>),
}

/// A parsed selector; the empty selector matches every label set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

impl LabelSelector {
    /// Parses `text`; the error says what is wrong and where.
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        ParseError::check_len(text, MAX_SELECTOR_BYTES)?;
        let mut parser = Parser { text, pos: 0 };
        let mut requirements = Vec::new();
        parser.skip_ws();
        if parser.at_end() {
            return Ok(Self::default());
        }
        loop {
            requirements.push(parser.requirement().map_err(ParseError::Malformed)?);
            parser.skip_ws();
            if parser.at_end() {
                break;
            }
            parser.expect(',').map_err(ParseError::Malformed)?;
        }
        Ok(Self { requirements })
    }

    /// Whether labels satisfy every requirement.
    pub fn matches(&self, labels: &HashMap<String, String>) -> bool {
        self.requirements.iter().all(|req| match req {
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::NotExists(k) => !labels.contains_key(k),
            Requirement::In(k, values) => labels.get(k).is_some_and(|v| values.contains(v)),
            Requirement::NotIn(k, values) => labels.get(k).is_none_or(|v| !values.contains(v)),
        })
    }
}

struct Parser<'a> {
    text: &'a str,
    pos: usize,
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/')
}

impl Parser<'_> {
    fn at_end(&self) -> bool {
        self.pos >= self.text.len()
    }

    fn peek(&self) -> Option<char> {
        self.text[self.pos..].chars().next()
    }

    fn skip_ws(&mut self) {
        // Whitespace outside ASCII is several bytes long: step by the whole
        // character so `pos` stays on a boundary.
        while let Some(c) = self.peek().filter(|c| c.is_whitespace()) {
            self.pos += c.len_utf8();
        }
    }

    fn expect(&mut self, c: char) -> Result<(), String> {
        self.skip_ws();
        if self.peek() == Some(c) {
            self.pos += c.len_utf8();
            Ok(())
        } else {
            Err(format!("expected '{c}' at offset {}", self.pos))
        }
    }

    fn eat(&mut self, s: &str) -> bool {
        if self.text[self.pos..].starts_with(s) {
            self.pos += s.len();
            true
        } else {
            false
        }
    }

    fn name(&mut self, what: &str, allow_empty: bool) -> Result<String, String> {
        self.skip_ws();
        let start = self.pos;
        while self.peek().is_some_and(is_name_char) {
            self.pos += 1;
        }
        if self.pos == start && !allow_empty {
            return Err(format!("expected a {what} at offset {start}"));
        }
        Ok(self.text[start..self.pos].to_owned())
    }

    fn set(&mut self) -> Result<BTreeSet<String>, String> {
        self.expect('(')?;
        let mut values = BTreeSet::new();
        loop {
            values.insert(self.name("value", false)?);
            self.skip_ws();
            if self.eat(")") {
                return Ok(values);
            }
            self.expect(',')?;
        }
    }

    fn requirement(&mut self) -> Result<Requirement, String> {
        self.skip_ws();
        if self.eat("!") {
            return Ok(Requirement::NotExists(self.name("label key", false)?));
        }
        let key = self.name("label key", false)?;
        self.skip_ws();
        if self.eat("!=") {
            let value = self.name("value", true)?;
            return Ok(Requirement::NotIn(key, BTreeSet::from([value])));
        }
        if self.eat("==") || self.eat("=") {
            let value = self.name("value", true)?;
            return Ok(Requirement::In(key, BTreeSet::from([value])));
        }
        let rest = &self.text[self.pos..];
        let word_end = rest
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(rest.len());
        match &rest[..word_end] {
            "in" => {
                self.pos += 2;
                Ok(Requirement::In(key, self.set()?))
            }
            "notin" => {
                self.pos += 5;
                Ok(Requirement::NotIn(key, self.set()?))
            }
            "" => Ok(Requirement::Exists(key)),
            other => Err(format!(
                "unexpected {} after label key {}; expected =, !=, in or notin",
                quote(other),
                quote(&key)
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn parses_and_matches() {
        let sel = LabelSelector::parse("env=prod, tier in (web, api), !canary, team").unwrap();
        assert!(sel.matches(&labels(&[("env", "prod"), ("tier", "api"), ("team", "x")])));
        assert!(!sel.matches(&labels(&[("env", "prod"), ("tier", "db"), ("team", "x")])));
        assert!(!sel.matches(&labels(&[
            ("env", "prod"),
            ("tier", "web"),
            ("team", "x"),
            ("canary", "1")
        ])));
        let sel = LabelSelector::parse("agent notin (sub), role!=root").unwrap();
        assert!(sel.matches(&labels(&[])));
        assert!(!sel.matches(&labels(&[("agent", "sub")])));
        assert!(LabelSelector::parse("").unwrap().matches(&labels(&[])));
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            "env=", "=x", "a in (x", "a in ()", "a,,b", "a b", "a=b c", "a ~ b", ",",
        ] {
            if bad == "env=" {
                // An empty value is allowed, as in Kubernetes.
                assert!(LabelSelector::parse(bad).is_ok());
                continue;
            }
            assert!(LabelSelector::parse(bad).is_err(), "{bad:?} should fail");
        }
    }

    #[test]
    fn whitespace_outside_ascii_is_skipped_whole() {
        // U+3000 is whitespace three bytes long: stepping by one byte panicked.
        let sel = LabelSelector::parse("env\u{3000}=\u{3000}prod").unwrap();
        assert!(sel.matches(&labels(&[("env", "prod")])));
        assert!(LabelSelector::parse("a\u{3000}").is_ok());
    }

    #[test]
    fn refuses_long_input() {
        let long = vec!["a"; MAX_SELECTOR_BYTES].join(",");
        assert!(matches!(
            LabelSelector::parse(&long),
            Err(ParseError::TooLong { .. })
        ));
    }

    mod fuzz {
        use proptest::prelude::*;

        use super::*;

        proptest! {
            #![proptest_config(ProptestConfig {
                cases: 512,
                failure_persistence: None,
                ..ProptestConfig::default()
            })]

            #[test]
            fn arbitrary_text_parses_or_refuses(
                text in prop_oneof![
                    any::<String>(),
                    "[a-c=!, ()\u{3000}\u{a0}\t]{0,40}",
                    prop::collection::vec(
                        prop::sample::select(vec![
                            "a", "b", "=", "==", "!=", "!", " in ", " notin ", "(", ")", ",", " ",
                            "\u{3000}", "é",
                        ]),
                        0..30,
                    )
                    .prop_map(|parts| parts.concat()),
                ],
            ) {
                if let Ok(selector) = LabelSelector::parse(&text) {
                    let _ = selector.matches(&labels(&[("a", "b")]));
                }
            }
        }
    }
}
