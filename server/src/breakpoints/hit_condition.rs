//! Hit conditions, evaluated by stepd itself so every adapter behaves alike:
//! `N` / `==N` (the Nth hit), `>N`, `>=N`, `<N`, `<=N`, `%N` (every Nth hit).

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
    pub fn parse(text: &str) -> Result<Self, String> {
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
            format!("{text:?} is not a hit condition: use N, ==N, >N, >=N, <N, <=N or %N")
        })?;
        if n == 0 && matches!(op, "%" | "" | "==") {
            return Err(format!("{text:?}: the count must be at least 1"));
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
}
