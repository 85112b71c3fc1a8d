//! An inspector's configuration: defaults, validation of what Refresh and
//! Inspect send, and the protobuf form every rendering carries.

use crate::error::FieldViolation;
use stepd_proto::v1::{InspectorConfig, ViewMode};

use super::value::PrintLimits;
use crate::error::{ApiError, ApiResult};

/// Largest page accepted.
pub const MAX_PAGE_SIZE: u32 = 1000;

/// Configuration in force for one inspector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Children per page.
    pub page_size: u32,
    /// Longest printed atom.
    pub max_atom_length: u32,
    /// Longest printed value.
    pub max_value_length: u32,
    /// Elements printed of a nested collection.
    pub max_coll_size: u32,
    /// Nesting printed before "…" (None = unlimited).
    pub max_nested_depth: Option<u32>,
    /// Pretty-print nested values.
    pub pretty_print: bool,
    /// Sort map keys.
    pub sort_maps: bool,
    /// Show only what differs from the previous rendering.
    pub only_diff: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            page_size: 32,
            max_atom_length: 150,
            max_value_length: 10_000,
            max_coll_size: 5,
            max_nested_depth: None,
            pretty_print: false,
            sort_maps: false,
            only_diff: false,
        }
    }
}

impl Settings {
    /// Applies the fields set in `config`; returns the view mode it asks for,
    /// if any. Nothing changes when a field is invalid.
    pub fn apply(&mut self, config: &InspectorConfig) -> ApiResult<Option<ViewMode>> {
        let mut violations = Vec::new();
        let mut next = self.clone();
        let mut positive = |field: &str, value: Option<u32>, max: u32, slot: &mut u32| {
            if let Some(v) = value {
                if v == 0 || v > max {
                    violations.push(FieldViolation::new(
                        format!("config.{field}"),
                        format!("must be between 1 and {max}, not {v}"),
                    ));
                } else {
                    *slot = v;
                }
            }
        };
        positive(
            "page_size",
            config.page_size,
            MAX_PAGE_SIZE,
            &mut next.page_size,
        );
        positive(
            "max_atom_length",
            config.max_atom_length,
            u32::MAX,
            &mut next.max_atom_length,
        );
        positive(
            "max_value_length",
            config.max_value_length,
            u32::MAX,
            &mut next.max_value_length,
        );
        positive(
            "max_coll_size",
            config.max_coll_size,
            u32::MAX,
            &mut next.max_coll_size,
        );
        if let Some(depth) = config.max_nested_depth {
            next.max_nested_depth = (depth > 0).then_some(depth);
        }
        if let Some(b) = config.pretty_print {
            next.pretty_print = b;
        }
        if let Some(b) = config.sort_maps {
            next.sort_maps = b;
        }
        if let Some(b) = config.only_diff {
            next.only_diff = b;
        }
        let view = match ViewMode::try_from(config.view_mode) {
            Ok(ViewMode::Unspecified) => None,
            Ok(mode) => Some(mode),
            Err(_) => {
                violations.push(FieldViolation::new(
                    "config.view_mode",
                    format!("{} is not a view mode", config.view_mode),
                ));
                None
            }
        };
        if !violations.is_empty() {
            return Err(ApiError::invalid(violations));
        }
        *self = next;
        Ok(view)
    }

    /// The configuration as sent in renderings (every field set).
    pub fn to_proto(&self, view: ViewMode) -> InspectorConfig {
        InspectorConfig {
            page_size: Some(self.page_size),
            max_atom_length: Some(self.max_atom_length),
            max_value_length: Some(self.max_value_length),
            max_coll_size: Some(self.max_coll_size),
            max_nested_depth: Some(self.max_nested_depth.unwrap_or(0)),
            pretty_print: Some(self.pretty_print),
            sort_maps: Some(self.sort_maps),
            only_diff: Some(self.only_diff),
            view_mode: view.into(),
        }
    }

    /// Limits for values that print themselves.
    pub fn limits(&self) -> PrintLimits {
        PrintLimits {
            max_coll_size: self.max_coll_size as usize,
            max_nested_depth: self.max_nested_depth.map(|d| d as usize),
            max_atom_length: self.max_atom_length as usize,
            pretty: self.pretty_print,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_fields_replace_and_bad_ones_change_nothing() {
        let mut s = Settings::default();
        let view = s
            .apply(&InspectorConfig {
                page_size: Some(8),
                sort_maps: Some(true),
                view_mode: ViewMode::Table.into(),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(view, Some(ViewMode::Table));
        assert_eq!(s.page_size, 8);
        assert!(s.sort_maps);
        assert_eq!(s.max_atom_length, 150);
        let err = s
            .apply(&InspectorConfig {
                page_size: Some(0),
                pretty_print: Some(true),
                ..Default::default()
            })
            .unwrap_err();
        assert_eq!(err.reason(), stepd_proto::v1::ErrorReason::InvalidArgument);
        assert_eq!(s.page_size, 8);
        assert!(!s.pretty_print);
        assert_eq!(s.to_proto(ViewMode::Normal).page_size, Some(8));
    }
}
