//! Conditions of probe breakpoints: a small expression language over the held
//! point, evaluated by the probe libraries (so an unarmed point never waits on
//! the network) and validated here when a breakpoint is added.
//!
//! ```text
//! expr       := and ("||" and)*
//! and        := unary ("&&" unary)*
//! unary      := "!" unary | "(" expr ")" | comparison
//! comparison := operand [op operand]        -- an operand alone tests truthiness
//! op         := "==" | "!=" | "<" | "<=" | ">" | ">=" | "contains" | "matches"
//! operand    := path | string | number | "true" | "false" | "null"
//! path       := ("value" | "name" | "kind" | "labels") ("." ident | "[" (int | string) "]")*
//! ```
//!
//! `docs/probe-conditions.md` describes the semantics and the limits; the
//! shared vectors in `clients/testdata/conditions.json` hold every
//! implementation to them.

use std::collections::BTreeMap;

use serde_json::Value;

use super::Glob;
use crate::error::{ParseError, quote};

/// The longest condition accepted, in bytes of UTF-8 (checked first as a
/// size limit, see `crate::limits`; here again as a backstop). The probe libraries
/// refuse longer ones too.
pub const MAX_CONDITION_BYTES: usize = crate::limits::CONDITION_BYTES.max;

/// The deepest nesting of `(` and `!` accepted: the parser and the probe
/// libraries' evaluators recurse once per level, so it bounds their stacks.
pub const MAX_CONDITION_DEPTH: usize = 32;

/// A parsed condition.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// Both hold.
    And(Box<Expr>, Box<Expr>),
    /// Either holds.
    Or(Box<Expr>, Box<Expr>),
    /// Does not hold.
    Not(Box<Expr>),
    /// A comparison.
    Compare(Operand, Op, Operand),
    /// An operand's truthiness.
    Truthy(Operand),
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Deep equality.
    Eq,
    /// Deep inequality.
    Ne,
    /// Less than (numbers, or strings by code point).
    Lt,
    /// At most.
    Le,
    /// Greater than.
    Gt,
    /// At least.
    Ge,
    /// Substring, list element, or object key.
    Contains,
    /// Glob match of a string.
    Matches,
}

/// One step of a path.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// `.field` or `["field"]`.
    Key(String),
    /// `[3]`.
    Index(usize),
}

/// A value in a comparison.
#[derive(Debug, Clone, PartialEq)]
pub enum Operand {
    /// A path into the point.
    Path(String, Vec<Step>),
    /// A literal.
    Literal(Value),
}

/// The point a condition is evaluated against.
pub struct Point<'a> {
    /// Point kind.
    pub kind: &'a str,
    /// Point name.
    pub name: &'a str,
    /// The held value.
    pub value: &'a Value,
    /// The probe's labels.
    pub labels: &'a BTreeMap<String, String>,
}

/// Parses a condition; the error says what is wrong and where.
pub fn parse(text: &str) -> Result<Expr, ParseError> {
    ParseError::check_len(text, MAX_CONDITION_BYTES)?;
    let tokens = tokenize(text)?;
    let mut parser = Parser {
        tokens,
        pos: 0,
        depth: 0,
    };
    let expr = parser.or()?;
    match parser.tokens.get(parser.pos) {
        None => Ok(expr),
        Some(t) => Err(format!("unexpected {} after a complete condition", t.describe()).into()),
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    Str(String),
    Num(f64),
    Op(&'static str),
}

impl Token {
    /// The token as an error message names it, quoting at most a prefix.
    fn describe(&self) -> String {
        match self {
            Token::Ident(word) => quote(word),
            Token::Str(s) => format!("string {}", quote(s)),
            Token::Num(n) => n.to_string(),
            Token::Op(op) => format!("{op:?}"),
        }
    }
}

fn tokenize(text: &str) -> Result<Vec<Token>, String> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let two: String = chars[i..(i + 2).min(chars.len())].iter().collect();
        if let Some(op) = ["==", "!=", "<=", ">=", "&&", "||"]
            .into_iter()
            .find(|o| *o == two)
        {
            tokens.push(Token::Op(op));
            i += 2;
            continue;
        }
        if let Some(op) = ["<", ">", "!", "(", ")", "[", "]", "."]
            .into_iter()
            .find(|o| o.starts_with(c))
        {
            tokens.push(Token::Op(op));
            i += 1;
            continue;
        }
        if c == '"' || c == '\'' {
            let mut s = String::new();
            i += 1;
            loop {
                match chars.get(i) {
                    None => return Err("unterminated string".into()),
                    Some(&q) if q == c => break,
                    Some('\\') => {
                        i += 1;
                        match chars.get(i) {
                            Some('n') => s.push('\n'),
                            Some('t') => s.push('\t'),
                            Some(&other) => s.push(other),
                            None => return Err("unterminated string".into()),
                        }
                    }
                    Some(&other) => s.push(other),
                }
                i += 1;
            }
            i += 1;
            tokens.push(Token::Str(s));
            continue;
        }
        if c.is_ascii_digit() || (c == '-' && chars.get(i + 1).is_some_and(char::is_ascii_digit)) {
            let start = i;
            i += 1;
            while chars
                .get(i)
                .is_some_and(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E'))
            {
                i += 1;
            }
            let text: String = chars[start..i].iter().collect();
            let n = text
                .parse::<f64>()
                .map_err(|_| format!("bad number {}", quote(&text)))?;
            tokens.push(Token::Num(n));
            continue;
        }
        if c.is_alphabetic() || c == '_' {
            let start = i;
            while chars
                .get(i)
                .is_some_and(|c| c.is_alphanumeric() || *c == '_')
            {
                i += 1;
            }
            tokens.push(Token::Ident(chars[start..i].iter().collect()));
            continue;
        }
        return Err(format!("unexpected character {c:?} at offset {i}"));
    }
    Ok(tokens)
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
    /// How many `(` and `!` enclose the current position.
    depth: usize,
}

const ROOTS: &[&str] = &["value", "name", "kind", "labels"];

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn eat(&mut self, op: &str) -> bool {
        if matches!(self.peek(), Some(Token::Op(o)) if *o == op) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// Enters one more level of `(` or `!`, refusing past the limit before
    /// the recursion that would follow.
    fn deeper(&mut self) -> Result<(), ParseError> {
        self.depth += 1;
        if self.depth > MAX_CONDITION_DEPTH {
            return Err(ParseError::TooDeep {
                limit: MAX_CONDITION_DEPTH,
            });
        }
        Ok(())
    }

    fn or(&mut self) -> Result<Expr, ParseError> {
        let mut left = self.and()?;
        while self.eat("||") {
            left = Expr::Or(Box::new(left), Box::new(self.and()?));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Expr, ParseError> {
        let mut left = self.unary()?;
        while self.eat("&&") {
            left = Expr::And(Box::new(left), Box::new(self.unary()?));
        }
        Ok(left)
    }

    fn unary(&mut self) -> Result<Expr, ParseError> {
        if self.eat("!") {
            self.deeper()?;
            let inner = self.unary()?;
            self.depth -= 1;
            return Ok(Expr::Not(Box::new(inner)));
        }
        if self.eat("(") {
            self.deeper()?;
            let inner = self.or()?;
            if !self.eat(")") {
                return Err("missing ')'".into());
            }
            self.depth -= 1;
            return Ok(inner);
        }
        let left = self.operand()?;
        let op = match self.peek() {
            Some(Token::Op("==")) => Some(Op::Eq),
            Some(Token::Op("!=")) => Some(Op::Ne),
            Some(Token::Op("<")) => Some(Op::Lt),
            Some(Token::Op("<=")) => Some(Op::Le),
            Some(Token::Op(">")) => Some(Op::Gt),
            Some(Token::Op(">=")) => Some(Op::Ge),
            Some(Token::Ident(word)) if word == "contains" => Some(Op::Contains),
            Some(Token::Ident(word)) if word == "matches" => Some(Op::Matches),
            _ => None,
        };
        let Some(op) = op else {
            return Ok(Expr::Truthy(left));
        };
        self.pos += 1;
        let right = self.operand()?;
        if op == Op::Matches {
            match &right {
                Operand::Literal(Value::String(glob)) => {
                    Glob::parse(glob).map_err(|e| {
                        ParseError::Malformed(format!("bad glob after matches: {e}"))
                    })?;
                }
                _ => return Err("matches takes a string glob on its right".into()),
            }
        }
        Ok(Expr::Compare(left, op, right))
    }

    fn operand(&mut self) -> Result<Operand, ParseError> {
        let token = self
            .peek()
            .cloned()
            .ok_or("the condition ends where a value is expected")?;
        self.pos += 1;
        Ok(match token {
            Token::Str(s) => Operand::Literal(Value::String(s)),
            Token::Num(n) => Operand::Literal(serde_json::json!(n)),
            Token::Ident(word) => match word.as_str() {
                "true" => Operand::Literal(Value::Bool(true)),
                "false" => Operand::Literal(Value::Bool(false)),
                "null" => Operand::Literal(Value::Null),
                root if ROOTS.contains(&root) => {
                    let mut steps = Vec::new();
                    loop {
                        if self.eat(".") {
                            match self.peek().cloned() {
                                Some(Token::Ident(field)) => {
                                    self.pos += 1;
                                    steps.push(Step::Key(field));
                                }
                                _ => return Err("a field name must follow '.'".into()),
                            }
                        } else if self.eat("[") {
                            let step = match self.peek().cloned() {
                                Some(Token::Num(n)) if n >= 0.0 && n.fract() == 0.0 => {
                                    Step::Index(n as usize)
                                }
                                Some(Token::Str(key)) => Step::Key(key),
                                _ => return Err("an index or a quoted key must follow '['".into()),
                            };
                            self.pos += 1;
                            steps.push(step);
                            if !self.eat("]") {
                                return Err("missing ']'".into());
                            }
                        } else {
                            break;
                        }
                    }
                    Operand::Path(word, steps)
                }
                other => {
                    return Err(format!(
                        "unknown name {}: paths start with value, name, kind or labels",
                        quote(other)
                    )
                    .into());
                }
            },
            Token::Op(op) => {
                return Err(format!("unexpected {op:?} where a value is expected").into());
            }
        })
    }
}

impl Expr {
    /// The expression's value at the point: a path's value, or the truth of
    /// a comparison (log messages interpolate it).
    pub fn value(&self, point: &Point<'_>) -> Value {
        match self {
            Expr::Truthy(o) => resolve(o, point),
            other => Value::Bool(other.eval(point)),
        }
    }

    /// Whether the point satisfies the condition.
    pub fn eval(&self, point: &Point<'_>) -> bool {
        match self {
            Expr::And(a, b) => a.eval(point) && b.eval(point),
            Expr::Or(a, b) => a.eval(point) || b.eval(point),
            Expr::Not(e) => !e.eval(point),
            Expr::Truthy(o) => truthy(&resolve(o, point)),
            Expr::Compare(a, op, b) => compare(&resolve(a, point), *op, &resolve(b, point)),
        }
    }
}

fn resolve(operand: &Operand, point: &Point<'_>) -> Value {
    match operand {
        Operand::Literal(v) => v.clone(),
        Operand::Path(root, steps) => {
            let mut current = match root.as_str() {
                "value" => point.value.clone(),
                "name" => Value::String(point.name.to_owned()),
                "kind" => Value::String(point.kind.to_owned()),
                _ => serde_json::to_value(point.labels).unwrap_or(Value::Null),
            };
            for step in steps {
                current = match (step, &current) {
                    (Step::Key(k), Value::Object(o)) => o.get(k).cloned().unwrap_or(Value::Null),
                    (Step::Index(i), Value::Array(a)) => a.get(*i).cloned().unwrap_or(Value::Null),
                    _ => Value::Null,
                };
            }
            current
        }
    }
}

fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|n| n != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

fn compare(a: &Value, op: Op, b: &Value) -> bool {
    match op {
        Op::Eq => equal(a, b),
        Op::Ne => !equal(a, b),
        Op::Lt | Op::Le | Op::Gt | Op::Ge => {
            let ordering = match (a, b) {
                (Value::Number(x), Value::Number(y)) => x.as_f64().partial_cmp(&y.as_f64()),
                (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
                _ => None,
            };
            ordering.is_some_and(|o| match op {
                Op::Lt => o.is_lt(),
                Op::Le => o.is_le(),
                Op::Gt => o.is_gt(),
                _ => o.is_ge(),
            })
        }
        Op::Contains => match (a, b) {
            (Value::String(s), Value::String(sub)) => s.contains(sub.as_str()),
            (Value::Array(items), needle) => items.iter().any(|i| equal(i, needle)),
            (Value::Object(o), Value::String(key)) => o.contains_key(key),
            _ => false,
        },
        Op::Matches => match (a, b) {
            (Value::String(s), Value::String(glob)) => {
                Glob::parse(glob).is_ok_and(|g| g.matches(s))
            }
            _ => false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vectors every probe library is tested against too.
    #[test]
    fn shared_vectors() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../clients/testdata/conditions.json"
        );
        let text = std::fs::read_to_string(path).expect("shared condition vectors");
        let vectors: Value = serde_json::from_str(&text).unwrap();
        let mut checked = 0;
        for case in vectors["valid"].as_array().unwrap() {
            let condition = case["condition"].as_str().unwrap();
            let expr = parse(condition).unwrap_or_else(|e| panic!("{condition}: {e}"));
            let point = &case["point"];
            let labels: BTreeMap<String, String> =
                serde_json::from_value(point["labels"].clone()).unwrap_or_default();
            let p = Point {
                kind: point["kind"].as_str().unwrap_or_default(),
                name: point["name"].as_str().unwrap_or_default(),
                value: &point["value"],
                labels: &labels,
            };
            assert_eq!(
                expr.eval(&p),
                case["result"].as_bool().unwrap(),
                "{condition} on {point}"
            );
            checked += 1;
        }
        for case in vectors["invalid"].as_array().unwrap() {
            let condition = case.as_str().unwrap();
            assert!(parse(condition).is_err(), "{condition:?} should not parse");
            checked += 1;
        }
        assert!(checked >= 30, "only {checked} vectors");
    }

    /// The pathological vectors every probe library is tested against too:
    /// inputs over the limits are refused, and globs match in bounded time.
    #[test]
    fn shared_pathological_vectors() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../clients/testdata/conditions.json"
        );
        let text = std::fs::read_to_string(path).expect("shared condition vectors");
        let vectors: Value = serde_json::from_str(&text).unwrap();
        let cases = &vectors["pathological"];
        let build = |parts: &Value| -> String {
            parts
                .as_array()
                .unwrap()
                .iter()
                .map(|p| {
                    p[0].as_str()
                        .unwrap()
                        .repeat(p[1].as_u64().unwrap() as usize)
                })
                .collect()
        };
        let point = &cases["point"];
        let labels = BTreeMap::new();
        let p = Point {
            kind: point["kind"].as_str().unwrap(),
            name: point["name"].as_str().unwrap(),
            value: &point["value"],
            labels: &labels,
        };
        let max = std::time::Duration::from_millis(cases["max_ms"].as_u64().unwrap());
        for case in cases["conditions"].as_array().unwrap() {
            let about = &case["about"];
            match (
                parse(&build(&case["condition"])),
                case["valid"].as_bool().unwrap(),
            ) {
                (Ok(expr), true) => assert_eq!(expr.eval(&p), case["result"].as_bool().unwrap()),
                (Err(_), false) => {}
                (got, _) => panic!("{about}: {got:?}"),
            }
        }
        for case in cases["globs"].as_array().unwrap() {
            let about = &case["about"];
            let (glob, name) = (build(&case["glob"]), build(&case["name"]));
            let started = std::time::Instant::now();
            match (Glob::parse(&glob), case["valid"].as_bool().unwrap()) {
                (Ok(g), true) => assert_eq!(g.matches(&name), case["result"].as_bool().unwrap()),
                (Err(_), false) => {}
                (got, _) => panic!("{about}: {got:?}"),
            }
            assert!(started.elapsed() < max, "{about}: {:?}", started.elapsed());
        }
    }

    #[test]
    fn refuses_deep_nesting_and_long_input_without_overflowing() {
        // The inputs that overflowed the daemon's stack.
        let parens = format!("{}name{}", "(".repeat(2000), ")".repeat(2000));
        assert_eq!(
            parse(&parens),
            Err(ParseError::TooDeep {
                limit: MAX_CONDITION_DEPTH
            })
        );
        let nots = format!("{}name", "!".repeat(10_000));
        assert!(matches!(parse(&nots), Err(ParseError::TooLong { .. })));
        let nots = format!("{}name", "!".repeat(4000));
        assert!(matches!(parse(&nots), Err(ParseError::TooDeep { .. })));
        // The deepest nesting allowed still parses, and one more does not.
        let at = |n: usize| format!("{}name{}", "!(".repeat(n / 2), ")".repeat(n / 2));
        assert!(parse(&at(MAX_CONDITION_DEPTH)).is_ok());
        assert!(parse(&at(MAX_CONDITION_DEPTH + 2)).is_err());
        // Long chains are not nesting: they are bounded by the length alone.
        let chain = vec!["1"; 1000].join("&&");
        assert!(parse(&chain).is_ok());
    }

    #[test]
    fn errors_quote_a_bounded_prefix() {
        let long = "x".repeat(3000);
        let err = parse(&long).unwrap_err().to_string();
        assert!(err.len() < 200, "{err}");
        let err = parse(&format!("name == 1 \"{long}\""))
            .unwrap_err()
            .to_string();
        assert!(err.len() < 200, "{err}");
    }

    mod fuzz {
        use proptest::prelude::*;

        use super::*;

        fn config() -> ProptestConfig {
            ProptestConfig {
                cases: 256,
                failure_persistence: None,
                ..ProptestConfig::default()
            }
        }

        /// Fragments of the language, so that generated text often parses.
        fn fragment() -> impl Strategy<Value = &'static str> {
            prop::sample::select(vec![
                "value",
                "name",
                "kind",
                "labels",
                ".",
                "a",
                "[",
                "]",
                "0",
                "1.5",
                "-2",
                "\"s\"",
                "'t'",
                "(",
                ")",
                "!",
                "&&",
                "||",
                "==",
                "!=",
                "<",
                "<=",
                ">",
                ">=",
                "contains",
                "matches",
                "\"*x?[a-c]\"",
                "true",
                "false",
                "null",
                " ",
                "\"",
                "\\",
                "1e999",
            ])
        }

        fn point_value() -> Value {
            serde_json::json!({"a": [1, "s", {"b": null}], "s": "text", "n": 2})
        }

        proptest! {
            #![proptest_config(config())]

            #[test]
            fn arbitrary_text_never_panics(text in any::<String>()) {
                let _ = parse(&text);
            }

            #[test]
            fn arbitrary_fragments_parse_or_refuse_and_evaluate(
                parts in prop::collection::vec(fragment(), 0..60)
            ) {
                let text = parts.concat();
                if let Ok(expr) = parse(&text) {
                    let labels = BTreeMap::from([("a".to_owned(), "b".to_owned())]);
                    let value = point_value();
                    let point = Point { kind: "k", name: "n", value: &value, labels: &labels };
                    let _ = expr.eval(&point);
                }
            }

            #[test]
            fn deep_nesting_is_refused_not_overflowed(
                open in prop::sample::select(vec!["(", "!", "!(", "(!"]),
                depth in 0usize..3000,
                close in any::<bool>(),
            ) {
                let closing = if close { ")".repeat(depth * open.matches('(').count()) } else { String::new() };
                let text = format!("{}value{closing}", open.repeat(depth));
                match parse(&text) {
                    Ok(_) => prop_assert!(depth * open.len() <= MAX_CONDITION_DEPTH),
                    Err(ParseError::TooLong { limit, len }) => {
                        prop_assert_eq!(limit, MAX_CONDITION_BYTES);
                        prop_assert!(len > MAX_CONDITION_BYTES);
                    }
                    Err(ParseError::TooDeep { limit }) => {
                        prop_assert_eq!(limit, MAX_CONDITION_DEPTH);
                        prop_assert!(depth * open.len() > MAX_CONDITION_DEPTH);
                    }
                    Err(ParseError::Malformed(_)) => prop_assert!(!close),
                    Err(other) => prop_assert!(false, "unexpected {other:?}"),
                }
            }
        }
    }
}
