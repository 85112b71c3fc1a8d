//! Log point messages: text with `{expression}` parts; `{{` and `}}` are
//! literal braces.

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
}
