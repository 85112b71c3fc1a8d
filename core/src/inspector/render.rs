//! Turning one level of an inspector into render items: a header (type,
//! value, counts), the children of the current page in the level's view mode,
//! and the page line.

use stepd_proto::v1::{Newline, RenderItem, ValueRef, ViewMode, render_item::Item};

use super::{
    settings::Settings,
    value::{Page, Shape},
};

/// Items in display order.
#[derive(Default)]
pub struct Items(pub Vec<RenderItem>);

impl Items {
    /// Plain text.
    pub fn text(&mut self, text: impl Into<String>) -> &mut Self {
        self.0.push(RenderItem {
            item: Some(Item::Text(text.into())),
        });
        self
    }
    /// A line break.
    pub fn newline(&mut self) -> &mut Self {
        self.0.push(RenderItem {
            item: Some(Item::Newline(Newline {})),
        });
        self
    }
    /// A navigable child.
    pub fn value(&mut self, repr: impl Into<String>, idx: u64) -> &mut Self {
        self.0.push(RenderItem {
            item: Some(Item::Value(ValueRef {
                repr: repr.into(),
                idx: u32::try_from(idx).unwrap_or(u32::MAX),
            })),
        });
        self
    }
    /// A line of text.
    pub fn line(&mut self, text: impl Into<String>) -> &mut Self {
        self.text(text).newline()
    }
}

/// `text` cut to `max` characters, marked with "…" when cut.
pub fn cut(text: &str, max: u32) -> String {
    let max = max as usize;
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max).collect();
    out.push('…');
    out
}

/// The rows of a TABLE view: columns from the first row.
pub struct Table {
    /// Column names.
    pub columns: Vec<String>,
    /// (child index, cells, cells beyond the columns).
    pub rows: Vec<(u64, Vec<String>, usize)>,
}

/// What is rendered for one level.
pub struct Level<'a> {
    /// Type name.
    pub type_name: &'a str,
    /// Printed value.
    pub repr: &'a str,
    /// Shape.
    pub shape: Shape,
    /// View mode.
    pub view: ViewMode,
    /// Current page number.
    pub page_no: u64,
    /// The children of the page.
    pub page: &'a Page,
    /// Rows, in TABLE view.
    pub table: Option<&'a Table>,
    /// (label, repr) of the children, after only_diff filtering: `None`
    /// shows all of the page.
    pub shown: Option<&'a [usize]>,
}

fn counts(page: &Page) -> String {
    match (page.total, page.indexed, page.named) {
        (None, _, _) => "unknown".to_owned(),
        (Some(t), Some(i), Some(n)) if i > 0 => format!("{t} ({i} indexed, {n} named)"),
        (Some(t), Some(i), None) if i > 0 => format!("{t} (indexed)"),
        (Some(t), _, Some(n)) if n > 0 => format!("{t} (named)"),
        (Some(t), _, _) => t.to_string(),
    }
}

/// Number of pages, when the total is known.
pub fn page_count(total: Option<u64>, page_size: u32) -> Option<u64> {
    total.map(|t| t.div_ceil(u64::from(page_size)).max(1))
}

/// Renders a level.
pub fn level(level: &Level<'_>, settings: &Settings) -> Items {
    let mut items = Items::default();
    if !level.type_name.is_empty() {
        items.line(format!("Type: {}", level.type_name));
    }
    items.line(format!(
        "Value: {}",
        cut(level.repr, settings.max_value_length)
    ));
    if level.shape == Shape::Atom {
        return items;
    }
    items.line(format!("Count: {}", counts(level.page)));
    let heading = match level.view {
        ViewMode::Table => "--- Table:",
        ViewMode::Object => "--- Fields:",
        _ => "--- Contents:",
    };
    items.line(heading);
    match (level.view, level.table) {
        (ViewMode::Table, Some(table)) => render_table(&mut items, table, settings),
        _ => {
            let limits = settings.limits();
            let start = level.page_no * u64::from(settings.page_size);
            let all: Vec<usize> = (0..level.page.children.len()).collect();
            let shown = level.shown.unwrap_or(&all);
            for &i in shown {
                let child = &level.page.children[i];
                let label = child.key.label();
                if matches!(child.key, super::value::Key::Index(_)) {
                    items.text(format!("  {label} "));
                } else {
                    items.text(format!("  {label} = "));
                }
                let repr = cut(&child.node.repr(&limits), settings.max_atom_length);
                items.value(repr, start + i as u64).newline();
            }
            let hidden = level.page.children.len() - shown.len();
            if hidden > 0 {
                items.line(format!("  ({hidden} unchanged, not shown)"));
            }
            if level.page.children.is_empty() {
                items.line("  (empty)");
            }
        }
    }
    if let Some(pages) = page_count(level.page.total, settings.page_size) {
        if pages > 1 {
            items.line(format!(
                "--- Page {} of {pages} ({} per page)",
                level.page_no + 1,
                settings.page_size
            ));
        }
    } else {
        items.line(format!(
            "--- Page {} ({} per page, more may follow)",
            level.page_no + 1,
            settings.page_size
        ));
    }
    items
}

fn render_table(items: &mut Items, table: &Table, settings: &Settings) {
    let cells: Vec<Vec<String>> = table
        .rows
        .iter()
        .map(|(_, row, _)| {
            row.iter()
                .map(|c| cut(c, settings.max_atom_length))
                .collect()
        })
        .collect();
    let mut widths: Vec<usize> = table.columns.iter().map(|c| c.chars().count()).collect();
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let index_width = table
        .rows
        .iter()
        .map(|(i, _, _)| format!("[{i}]").len())
        .max()
        .unwrap_or(1)
        .max(1);
    let pad = |s: &str, w: usize| format!("{s}{}", " ".repeat(w.saturating_sub(s.chars().count())));
    let mut header = format!("  {}", pad("#", index_width));
    for (c, w) in table.columns.iter().zip(&widths) {
        header.push_str(" | ");
        header.push_str(&pad(c, *w));
    }
    items.line(header.trim_end().to_owned());
    for ((i, _, extra), row) in table.rows.iter().zip(&cells) {
        items.text("  ");
        let label = format!("[{i}]");
        items.value(label.clone(), *i);
        let mut line = " ".repeat(index_width.saturating_sub(label.len()));
        for (c, w) in row.iter().zip(&widths) {
            line.push_str(" | ");
            line.push_str(&pad(c, *w));
        }
        if *extra > 0 {
            line.push_str(&format!(" | +{extra} more"));
        }
        items.text(line.trim_end().to_owned()).newline();
    }
    if table.rows.is_empty() {
        items.line("  (empty)");
    }
}

/// The items as plain text (values shown as their repr), for logs and tests.
pub fn plain(items: &[RenderItem]) -> String {
    items
        .iter()
        .map(|i| match &i.item {
            Some(Item::Text(t)) => t.clone(),
            Some(Item::Newline(_)) => "\n".to_owned(),
            Some(Item::Value(v)) => v.repr.clone(),
            None => String::new(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::inspector::{
        json_source::JsonNode,
        value::{Facet, Node},
    };

    #[tokio::test]
    async fn a_list_renders_header_children_and_pages() {
        let node: Arc<dyn Node> = Arc::new(JsonNode::new(crate::json::to_value(
            &serde_json::json!((0..40).collect::<Vec<_>>()),
        )));
        let settings = Settings::default();
        let page = node.children(Facet::Contents, 32, 32).await.unwrap();
        let repr = node.repr(&settings.limits());
        let items = level(
            &Level {
                type_name: "list",
                repr: &repr,
                shape: Shape::Sequence,
                view: ViewMode::Normal,
                page_no: 1,
                page: &page,
                table: None,
                shown: None,
            },
            &settings,
        );
        let text = plain(&items.0);
        assert!(text.starts_with("Type: list\nValue: [0, 1, 2, 3, 4, … 35 more]\n"));
        assert!(text.contains("Count: 40 (40 indexed, 0 named)"), "{text}");
        assert!(text.contains("  [32] 32\n"), "{text}");
        assert!(text.ends_with("--- Page 2 of 2 (32 per page)\n"), "{text}");
        let idx: Vec<u32> = items
            .0
            .iter()
            .filter_map(|i| match &i.item {
                Some(Item::Value(v)) => Some(v.idx),
                _ => None,
            })
            .collect();
        assert_eq!(idx, (32..40).collect::<Vec<_>>());
    }

    #[test]
    fn tables_pad_ragged_rows() {
        let table = Table {
            columns: vec!["name".into(), "age".into()],
            rows: vec![
                (0, vec!["ada".into(), "36".into()], 0),
                (1, vec!["bob".into(), String::new()], 1),
            ],
        };
        let mut items = Items::default();
        render_table(&mut items, &table, &Settings::default());
        let text = plain(&items.0);
        assert_eq!(
            text,
            "  #   | name | age\n  [0] | ada  | 36\n  [1] | bob  |     | +1 more\n"
        );
    }

    #[test]
    fn cut_marks_what_it_cuts() {
        assert_eq!(cut("abcdef", 3), "abc…");
        assert_eq!(cut("abc", 3), "abc");
    }
}
