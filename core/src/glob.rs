//! The daemon's one glob dialect: `*`, `?`, `[abc]`, `[a-z]`, `[!abc]` and
//! `\` escapes, matched against the whole name. Probe breakpoints' name
//! globs and `--redact` patterns are both these (the probe libraries
//! implement the same dialect, held to the same cases).

use crate::error::ParseError;

/// The longest glob accepted, in bytes of UTF-8: matching costs at most the
/// glob's length times the name's, so this bounds it. The probe libraries
/// refuse longer ones too.
pub const MAX_GLOB_BYTES: usize = crate::limits::GLOB_BYTES.max;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Literal(char),
    Any,
    Star,
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
}

/// A compiled glob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    tokens: Vec<Token>,
}

impl Glob {
    /// Compiles `pattern`; the error says what is malformed.
    pub fn parse(pattern: &str) -> Result<Self, ParseError> {
        ParseError::check_len(pattern, MAX_GLOB_BYTES)?;
        let mut tokens = Vec::new();
        let mut chars = pattern.chars().peekable();
        while let Some(c) = chars.next() {
            tokens.push(match c {
                '*' => Token::Star,
                '?' => Token::Any,
                '\\' => Token::Literal(chars.next().ok_or("trailing '\\' escapes nothing")?),
                '[' => {
                    let negated = chars.next_if(|&c| c == '!' || c == '^').is_some();
                    let mut ranges = Vec::new();
                    loop {
                        let lo = match chars.next() {
                            None => return Err("unclosed '[' character class".into()),
                            Some(']') if !ranges.is_empty() => break,
                            Some(']') => return Err("empty '[]' character class".into()),
                            Some('\\') => chars.next().ok_or("trailing '\\' escapes nothing")?,
                            Some(c) => c,
                        };
                        let hi = if chars.next_if_eq(&'-').is_some() {
                            match chars.next() {
                                None => return Err("unclosed '[' character class".into()),
                                Some(']') => {
                                    ranges.push((lo, lo));
                                    ranges.push(('-', '-'));
                                    break;
                                }
                                Some(hi) if hi < lo => {
                                    return Err(format!("range '{lo}-{hi}' is reversed").into());
                                }
                                Some(hi) => hi,
                            }
                        } else {
                            lo
                        };
                        ranges.push((lo, hi));
                    }
                    Token::Class { negated, ranges }
                }
                c => Token::Literal(c),
            });
        }
        Ok(Self { tokens })
    }

    /// A glob matching exactly `text`, every character literal: what a
    /// `--redact` pattern that is not a well-formed glob means. Not bounded
    /// by [`MAX_GLOB_BYTES`]: its text is the daemon's own configuration.
    pub fn literal(text: &str) -> Self {
        Self {
            tokens: text.chars().map(Token::Literal).collect(),
        }
    }

    /// This glob with `*` before and after: it matches names that contain a match.
    pub fn anywhere(mut self) -> Self {
        self.tokens.insert(0, Token::Star);
        self.tokens.push(Token::Star);
        self
    }

    /// Whether the whole of `name` matches.
    pub fn matches(&self, name: &str) -> bool {
        let name: Vec<char> = name.chars().collect();
        // Iterative matcher with one backtrack point, the last star: at most
        // the glob's length times the name's steps, never exponential.
        let (mut t, mut n) = (0, 0);
        let mut star: Option<(usize, usize)> = None;
        while n < name.len() {
            match self.tokens.get(t) {
                Some(Token::Star) => {
                    star = Some((t, n));
                    t += 1;
                    continue;
                }
                Some(tok) if single(tok, name[n]) => {
                    t += 1;
                    n += 1;
                    continue;
                }
                _ => {}
            }
            match star {
                Some((st, sn)) => {
                    t = st + 1;
                    n = sn + 1;
                    star = Some((st, sn + 1));
                }
                None => return false,
            }
        }
        self.tokens[t..].iter().all(|tok| *tok == Token::Star)
    }
}

fn single(tok: &Token, c: char) -> bool {
    match tok {
        Token::Literal(l) => *l == c,
        Token::Any => true,
        Token::Star => false,
        Token::Class { negated, ranges } => {
            ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi) != *negated
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_whole_names() {
        let g = |p: &str| Glob::parse(p).unwrap();
        assert!(g("Bash").matches("Bash"));
        assert!(!g("Bash").matches("Bash2"));
        assert!(g("web_*").matches("web_search"));
        assert!(g("*_*").matches("a_b_c"));
        assert!(g("a?c").matches("abc"));
        assert!(g("[A-C]at").matches("Bat"));
        assert!(!g("[!A-C]at").matches("Bat"));
        assert!(g("x\\*").matches("x*"));
        assert!(!g("x\\*").matches("xy"));
        assert!(g("*").matches(""));
        assert!(g("[a-]").matches("-"));
    }

    #[test]
    fn literal_and_anywhere() {
        let g = Glob::literal("a[b]*\\").anywhere();
        assert!(g.matches("xa[b]*\\y"));
        assert!(g.matches("a[b]*\\"));
        assert!(!g.matches("ab\\"));
        assert!(Glob::parse("k[0-9]").unwrap().anywhere().matches("my_k7_x"));
    }

    #[test]
    fn rejects_malformed() {
        for bad in ["[abc", "[]", "a\\", "[z-a]", "[a-"] {
            assert!(Glob::parse(bad).is_err(), "{bad:?} should fail");
        }
    }

    #[test]
    fn many_stars_match_in_bounded_time() {
        // The patterns that froze a backtracking matcher: each takes at most
        // the glob's length times the name's steps here.
        let started = std::time::Instant::now();
        let name = "a".repeat(10_000);
        for pattern in [
            format!("{}x", "*".repeat(12)),
            format!("{}x", "*a".repeat(400)),
            format!("{}b", "a*".repeat(400)),
        ] {
            assert!(!Glob::parse(&pattern).unwrap().matches(&name), "{pattern}");
        }
        assert!(Glob::parse(&"*a".repeat(400)).unwrap().matches(&name));
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "took {:?}",
            started.elapsed()
        );
    }

    #[test]
    fn refuses_long_patterns() {
        let long = "*".repeat(MAX_GLOB_BYTES + 1);
        assert!(matches!(
            Glob::parse(&long),
            Err(ParseError::TooLong { .. })
        ));
        assert!(Glob::parse(&long[1..]).is_ok());
    }

    mod fuzz {
        use proptest::prelude::*;

        use super::*;

        /// The obvious recursive matcher, exponential but right: small inputs
        /// hold the linear one to it.
        fn reference(tokens: &[Token], name: &[char]) -> bool {
            match tokens.split_first() {
                None => name.is_empty(),
                Some((Token::Star, rest)) => {
                    (0..=name.len()).any(|skip| reference(rest, &name[skip..]))
                }
                Some((tok, rest)) => name
                    .split_first()
                    .is_some_and(|(c, tail)| single(tok, *c) && reference(rest, tail)),
            }
        }

        fn config() -> ProptestConfig {
            ProptestConfig {
                cases: 512,
                failure_persistence: None,
                ..ProptestConfig::default()
            }
        }

        proptest! {
            #![proptest_config(config())]

            #[test]
            fn arbitrary_patterns_never_panic(pattern in any::<String>(), name in any::<String>()) {
                if let Ok(glob) = Glob::parse(&pattern) {
                    let _ = glob.matches(&name);
                }
            }

            #[test]
            fn agrees_with_the_reference(
                pattern in "[ab*?\\\\\\[\\]!-]{0,10}",
                name in "[ab*?!-]{0,10}",
            ) {
                if let Ok(glob) = Glob::parse(&pattern) {
                    let chars: Vec<char> = name.chars().collect();
                    prop_assert_eq!(glob.matches(&name), reference(&glob.tokens, &chars));
                }
            }
        }
    }
}
