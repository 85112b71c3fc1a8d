//! Log point messages: text with `{expression}` parts; `{{` and `}}` are
//! literal braces. `breakpoints::validate::log_message` bounds them (length,
//! expressions, brace depth) when a breakpoint is added; parsing here is one
//! pass and never recurses.

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
    let mut parts = Vec::new();
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
                        '{' => depth += 1,
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
    parts
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
        use crate::breakpoints::validate::{self, MAX_LOG_EXPRESSIONS};

        proptest! {
            #![proptest_config(ProptestConfig {
                cases: 512,
                failure_persistence: None,
                ..ProptestConfig::default()
            })]

            /// The validator reads a message as this parser does: what it
            /// accepts never has more expressions than the limit.
            #[test]
            fn the_validator_counts_what_the_parser_finds(
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
                match validate::log_message(&text) {
                    Ok(()) => prop_assert!(expressions <= MAX_LOG_EXPRESSIONS),
                    Err(crate::error::ParseError::TooMany { .. }) => {
                        prop_assert!(expressions > MAX_LOG_EXPRESSIONS)
                    }
                    Err(_) => {}
                }
            }
        }
    }
}
