//! Log point messages: text with `{expression}` parts; `{{` and `}}` are
//! literal braces. One scanner both splits a message and bounds it (length,
//! expressions, brace depth), so what is checked when a breakpoint is added
//! is exactly what is read at a hit; it is one pass and never recurses.

use crate::error::ParseError;

/// The longest log message template accepted, in bytes of UTF-8.
pub const MAX_LOG_MESSAGE_BYTES: usize = crate::limits::LOG_MESSAGE_BYTES.max;

/// The most `{expression}` parts a log message may have: each is one
/// evaluation at every hit.
pub const MAX_LOG_EXPRESSIONS: usize = 32;

/// The deepest nesting of braces inside one `{expression}`.
pub const MAX_LOG_BRACE_DEPTH: usize = 16;

/// One part of a message.
#[derive(Debug, PartialEq, Eq)]
pub enum Part {
    /// Literal text.
    Text(String),
    /// An expression to evaluate and print.
    Expr(String),
}

/// Splits a message into text and expressions. An unclosed `{` is text.
pub fn parse(message: &str) -> Vec<Part> {
    split(message).0
}

/// Checks a message against the limits, as it is read by [`parse`].
pub fn check(message: &str) -> Result<(), ParseError> {
    ParseError::check_len(message, MAX_LOG_MESSAGE_BYTES)?;
    let (parts, deepest) = split(message);
    if deepest > MAX_LOG_BRACE_DEPTH {
        return Err(ParseError::TooDeep {
            limit: MAX_LOG_BRACE_DEPTH,
        });
    }
    if parts.iter().filter(|p| matches!(p, Part::Expr(_))).count() > MAX_LOG_EXPRESSIONS {
        return Err(ParseError::TooMany {
            what: "{expression} parts",
            limit: MAX_LOG_EXPRESSIONS,
        });
    }
    Ok(())
}

/// The parts of a message, and the deepest brace nesting met in it.
fn split(message: &str) -> (Vec<Part>, usize) {
    let mut parts = Vec::new();
    let mut deepest = 0;
    let mut text = String::new();
    let mut chars = message.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                text.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                text.push('}');
            }
            '{' => {
                let mut expr = String::new();
                let mut depth = 1;
                for c in chars.by_ref() {
                    match c {
                        '{' => {
                            depth += 1;
                            deepest = deepest.max(depth);
                        }
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                    expr.push(c);
                }
                if depth == 0 {
                    if !text.is_empty() {
                        parts.push(Part::Text(std::mem::take(&mut text)));
                    }
                    parts.push(Part::Expr(expr.trim().to_owned()));
                } else {
                    text.push('{');
                    text.push_str(&expr);
                }
            }
            c => text.push(c),
        }
    }
    if !text.is_empty() {
        parts.push(Part::Text(text));
    }
    (parts, deepest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_text_and_expressions() {
        assert_eq!(
            parse("total={total} of {items[0]} {{literal}}"),
            vec![
                Part::Text("total=".into()),
                Part::Expr("total".into()),
                Part::Text(" of ".into()),
                Part::Expr("items[0]".into()),
                Part::Text(" {literal}".into()),
            ]
        );
        assert_eq!(parse("{d['k']}"), vec![Part::Expr("d['k']".into())]);
        assert_eq!(parse("open {x"), vec![Part::Text("open {x".into())]);
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

            /// Any message is split without a panic, and what the check
            /// accepts has no more expressions than the limit.
            #[test]
            fn any_message_is_split_and_bounded(
                text in prop_oneof![
                    any::<String>(),
                    prop::collection::vec(
                        prop::sample::select(vec!["{", "}", "{{", "}}", "x", " ", "{x}"]),
                        0..120,
                    )
                    .prop_map(|parts| parts.concat()),
                ],
            ) {
                let parts = parse(&text);
                let expressions = parts.iter().filter(|p| matches!(p, Part::Expr(_))).count();
                match check(&text) {
                    Ok(()) => prop_assert!(expressions <= MAX_LOG_EXPRESSIONS),
                    Err(ParseError::TooMany { .. }) => {
                        prop_assert!(expressions > MAX_LOG_EXPRESSIONS)
                    }
                    Err(_) => {}
                }
            }
        }
    }
}
