//! Name globs for probe breakpoints: `*`, `?`, `[abc]`, `[a-z]`, `[!abc]` and
//! `\` escapes, matched against the whole name.

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
    pub fn parse(pattern: &str) -> Result<Self, String> {
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
                                    return Err(format!("range '{lo}-{hi}' is reversed"));
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

    /// Whether the whole of `name` matches.
    pub fn matches(&self, name: &str) -> bool {
        let name: Vec<char> = name.chars().collect();
        // Iterative matcher with one backtrack point for the last star: linear
        // in practice and never exponential.
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
    fn rejects_malformed() {
        for bad in ["[abc", "[]", "a\\", "[z-a]", "[a-"] {
            assert!(Glob::parse(bad).is_err(), "{bad:?} should fail");
        }
    }
}
