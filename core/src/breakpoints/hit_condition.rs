//! Hit conditions, evaluated by stepd itself so every adapter behaves alike:
//! `N` / `==N` (the Nth hit), `>N`, `>=N`, `<N`, `<=N`, `%N` (every Nth hit).

use crate::error::{ParseError, quote};

/// The longest hit condition accepted, in bytes: an operator, spaces and a
/// 64-bit count fit many times over.
pub const MAX_HIT_CONDITION_BYTES: usize = crate::limits::HIT_CONDITION_BYTES.max;

/// A parsed hit condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HitCondition {
    /// Exactly the Nth hit.
    Eq(u64),
    /// Hits after the Nth.
    Gt(u64),
    /// The Nth hit and later ones.
    Ge(u64),
    /// Hits before the Nth.
    Lt(u64),
    /// Up to the Nth hit.
    Le(u64),
    /// Every Nth hit.
    Every(u64),
}

impl HitCondition {
    /// Parses the condition; the error says what is wrong.
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        ParseError::check_len(text, MAX_HIT_CONDITION_BYTES)?;
        let text = text.trim();
        type Build = fn(u64) -> HitCondition;
        let ops: [(&str, Build); 7] = [
            ("==", HitCondition::Eq),
            (">=", HitCondition::Ge),
            ("<=", HitCondition::Le),
            (">", HitCondition::Gt),
            ("<", HitCondition::Lt),
            ("%", HitCondition::Every),
            ("", HitCondition::Eq),
        ];
        let (op, build) = ops
            .iter()
            .find(|(op, _)| text.starts_with(op))
            .copied()
            .unwrap_or(("", HitCondition::Eq));
        let number = text[op.len()..].trim();
        let n: u64 = number.parse().map_err(|_| {
            ParseError::Malformed(format!(
                "{} is not a hit condition: use N, ==N, >N, >=N, <N, <=N or %N",
                quote(text)
            ))
        })?;
        if n == 0 && matches!(op, "%" | "" | "==") {
            return Err(format!("{}: the count must be at least 1", quote(text)).into());
        }
        Ok(build(n))
    }

    /// Whether the `hit`th hit (counting from 1) passes.
    pub fn passes(self, hit: u64) -> bool {
        match self {
            Self::Eq(n) => hit == n,
            Self::Gt(n) => hit > n,
            Self::Ge(n) => hit >= n,
            Self::Lt(n) => hit < n,
            Self::Le(n) => hit <= n,
            Self::Every(n) => hit.is_multiple_of(n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form() {
        assert_eq!(HitCondition::parse("3"), Ok(HitCondition::Eq(3)));
        assert_eq!(HitCondition::parse("== 3"), Ok(HitCondition::Eq(3)));
        assert_eq!(HitCondition::parse(">=2"), Ok(HitCondition::Ge(2)));
        assert_eq!(HitCondition::parse("%2"), Ok(HitCondition::Every(2)));
        assert!(HitCondition::parse("%0").is_err());
        assert!(HitCondition::parse("x > 2").is_err());
        assert!(HitCondition::parse("").is_err());
        assert!(HitCondition::Every(2).passes(4));
        assert!(!HitCondition::Gt(2).passes(2));
    }

    #[test]
    fn refuses_long_input_and_quotes_a_prefix() {
        let long = format!("{}1", " ".repeat(100));
        assert!(matches!(
            HitCondition::parse(&long),
            Err(ParseError::TooLong { .. })
        ));
        let err = HitCondition::parse(&"x".repeat(60))
            .unwrap_err()
            .to_string();
        assert!(err.len() < 200, "{err}");
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
                text in prop_oneof![any::<String>(), "[ =<>%0-9+-]{0,30}"],
                hit in any::<u64>(),
            ) {
                if let Ok(condition) = HitCondition::parse(&text) {
                    let _ = condition.passes(hit);
                }
            }
        }
    }
}
