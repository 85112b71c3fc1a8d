//! Values as a pause shows them: cut to a display limit, and saying so.

use stepd_proto::v1::DisplayValue;

/// Longest printed value in a pause before it is cut.
pub const DISPLAY_LIMIT: usize = 200;

/// A value cut to the display limit; the whole is reachable in the inspector.
pub fn display(text: &str, type_name: &str) -> DisplayValue {
    let truncated = text.chars().count() > DISPLAY_LIMIT;
    DisplayValue {
        text: if truncated {
            let mut cut: String = text.chars().take(DISPLAY_LIMIT).collect();
            cut.push('…');
            cut
        } else {
            text.to_owned()
        },
        truncated,
        r#type: type_name.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_values_are_cut_and_flagged() {
        let v = display(&"x".repeat(500), "str");
        assert!(v.truncated);
        assert_eq!(v.text.chars().count(), DISPLAY_LIMIT + 1);
        assert!(!display("short", "str").truncated);
    }
}
