//! One inspector: a stack of levels from the root value to the current one.
//! Each level remembers how it was reached, its page and its view mode, so
//! Pop restores them. Every operation either succeeds and answers the new
//! rendering, or fails and leaves the inspector as it was.

use std::sync::Arc;

use stepd_proto::v1::{InspectorConfig, PageInfo, Rendering, ViewMode};

use super::{
    analytics,
    render::{self, Items, Table, page_count},
    settings::Settings,
    value::{Child, Facet, Key, Node, Page, Shape},
};
use crate::error::{ApiError, ApiResult};

/// Columns read per row in TABLE view.
const MAX_COLUMNS: u64 = 16;

/// What the last rendering of a level showed: (page, view, (label, repr) of
/// each child), for only_diff.
type Shown = (u64, ViewMode, Vec<(String, String)>);

/// One level of the navigation.
#[derive(Clone, Debug)]
pub struct Level {
    node: Arc<dyn Node>,
    /// How it was reached from its parent (None at the root).
    key: Option<Key>,
    /// Its position in the parent's listing, and which listing.
    pos: u64,
    facet: Facet,
    page: u64,
    view: ViewMode,
    /// (page, view, (label, repr) of each child shown) of the last rendering.
    prev: Option<Shown>,
}

impl Level {
    fn new(node: Arc<dyn Node>, key: Option<Key>, pos: u64, facet: Facet) -> Self {
        Self {
            node,
            key,
            pos,
            facet,
            page: 0,
            view: ViewMode::Normal,
            prev: None,
        }
    }
}

/// The listing a view mode shows.
fn facet_of(view: ViewMode) -> Facet {
    if view == ViewMode::Object {
        Facet::Fields
    } else {
        Facet::Contents
    }
}

/// Whether a view mode applies to a value.
pub fn supports(node: &dyn Node, view: ViewMode) -> bool {
    match view {
        ViewMode::Unspecified | ViewMode::Normal => true,
        ViewMode::Table => node.shape() == Shape::Sequence,
        ViewMode::Object => node.has_fields(),
    }
}

fn invalid(field: &str, description: impl Into<String>) -> ApiError {
    ApiError::invalid_field(field, description)
}

/// Navigation over one value.
#[derive(Debug)]
pub struct Inspector {
    /// Its id.
    pub id: String,
    /// The session the value belongs to (empty for values of no session).
    pub session_id: String,
    settings: Settings,
    stack: Vec<Level>,
}

impl Inspector {
    /// An inspector at the root value.
    pub fn new(id: String, session_id: String, root: Arc<dyn Node>, settings: Settings) -> Self {
        Self {
            id,
            session_id,
            settings,
            stack: vec![Level::new(root, None, 0, Facet::Contents)],
        }
    }

    fn top(&self) -> &Level {
        self.stack.last().expect("an inspector always has its root")
    }

    fn top_mut(&mut self) -> &mut Level {
        self.stack
            .last_mut()
            .expect("an inspector always has its root")
    }

    /// Sets the root's view mode (from the initial configuration).
    pub fn set_view(&mut self, view: ViewMode) -> ApiResult<()> {
        if !supports(self.top().node.as_ref(), view) {
            return Err(invalid(
                "config.view_mode",
                format!(
                    "{} does not apply to this value",
                    view.as_str_name().trim_start_matches("VIEW_MODE_")
                ),
            ));
        }
        self.top_mut().view = view;
        Ok(())
    }

    /// How the current value was reached from the root.
    pub fn path(&self) -> String {
        self.stack
            .iter()
            .filter_map(|l| l.key.as_ref().map(Key::segment))
            .collect()
    }

    /// The current value.
    pub fn current(&self) -> Arc<dyn Node> {
        self.top().node.clone()
    }

    /// The print limits in force.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    async fn fetch(&self, level: &Level, page: u64) -> ApiResult<Page> {
        level.node.check()?;
        let size = u64::from(self.settings.page_size);
        level
            .node
            .children(facet_of(level.view), page * size, size)
            .await
    }

    /// Renders the current level.
    pub async fn render(&mut self) -> ApiResult<Rendering> {
        let page = self.fetch(self.top(), self.top().page).await?;
        self.render_with(page, Vec::new()).await
    }

    async fn render_with(&mut self, mut page: Page, extra: Vec<String>) -> ApiResult<Rendering> {
        let settings = self.settings.clone();
        let level = self.top().clone();
        let node = level.node.as_ref();
        if settings.sort_maps && matches!(node.shape(), Shape::Map | Shape::Object) {
            // Sorting applies within the page: a map larger than a page is
            // never read whole.
            page.children.sort_by_key(|c| c.key.label());
        }
        let table = if level.view == ViewMode::Table {
            Some(table(&page).await?)
        } else {
            None
        };
        let limits = settings.limits();
        let now: Vec<(String, String)> = page
            .children
            .iter()
            .map(|c| (c.key.label(), c.node.repr(&limits)))
            .collect();
        let shown: Option<Vec<usize>> = match (&level.prev, settings.only_diff) {
            (Some((p, v, before)), true) if *p == level.page && *v == level.view => Some(
                now.iter()
                    .enumerate()
                    .filter(|(_, entry)| !before.contains(entry))
                    .map(|(i, _)| i)
                    .collect(),
            ),
            _ => None,
        };
        let repr = node.repr(&limits);
        let type_name = node.type_name();
        let mut items = render::level(
            &render::Level {
                type_name: &type_name,
                repr: &repr,
                shape: node.shape(),
                view: level.view,
                page_no: level.page,
                page: &page,
                table: table.as_ref(),
                shown: shown.as_deref(),
            },
            &settings,
        );
        append(&mut items, extra);
        let total = page.total;
        self.top_mut().prev = Some((level.page, level.view, now));
        Ok(Rendering {
            inspector_id: self.id.clone(),
            items: items.0,
            path: self.path(),
            page: Some(PageInfo {
                page: u32::try_from(level.page).unwrap_or(u32::MAX),
                page_count: page_count(total, settings.page_size)
                    .map(|c| u32::try_from(c).unwrap_or(u32::MAX)),
                total,
                page_size: settings.page_size,
            }),
            view_mode: level.view.into(),
            config: Some(settings.to_proto(level.view)),
            r#type: type_name,
        })
    }

    /// The child at position `idx` of the current level's listing.
    pub async fn child(&self, idx: u64) -> ApiResult<(Child, Facet)> {
        let level = self.top();
        level.node.check()?;
        let facet = facet_of(level.view);
        let page = level.node.children(facet, idx, 1).await?;
        let missing = |total: Option<u64>| {
            invalid(
                "idx",
                match total {
                    Some(0) | None if level.node.shape() == Shape::Atom => {
                        format!("index {idx} does not exist: the value has no children")
                    }
                    Some(t) => {
                        format!("index {idx} does not exist: the value has {t} children (0..{t})")
                    }
                    None => format!("index {idx} does not exist"),
                },
            )
        };
        if page.total.is_some_and(|t| idx >= t) {
            return Err(missing(page.total));
        }
        let child = page
            .children
            .into_iter()
            .next()
            .ok_or_else(|| missing(page.total))?;
        Ok((child, facet))
    }

    /// Descends into a child.
    pub async fn push(&mut self, idx: u64) -> ApiResult<Rendering> {
        let (child, facet) = self.child(idx).await?;
        self.stack
            .push(Level::new(child.node, Some(child.key), idx, facet));
        match self.render().await {
            Ok(r) => Ok(r),
            Err(e) => {
                self.stack.pop();
                Err(e)
            }
        }
    }

    /// Goes back up.
    pub async fn pop(&mut self) -> ApiResult<Rendering> {
        if self.stack.len() < 2 {
            return Err(invalid(
                "inspector_id",
                "already at the root: nothing to pop",
            ));
        }
        let popped = self.stack.pop().expect("checked above");
        match self.render().await {
            Ok(r) => Ok(r),
            Err(e) => {
                self.stack.push(popped);
                Err(e)
            }
        }
    }

    /// Moves to the next (+1) or previous (-1) child of the parent.
    pub async fn sibling(&mut self, delta: i64) -> ApiResult<Rendering> {
        if self.stack.len() < 2 {
            return Err(invalid(
                "inspector_id",
                "the root has no siblings: push into a child first",
            ));
        }
        let current = self.top().clone();
        let parent = &self.stack[self.stack.len() - 2];
        let which = if delta > 0 { "next" } else { "previous" };
        let Some(pos) = current.pos.checked_add_signed(delta) else {
            return Err(invalid(
                "inspector_id",
                format!("no {which} sibling: this is the first child"),
            ));
        };
        parent.node.check()?;
        let page = parent.node.children(current.facet, pos, 1).await?;
        let Some(child) = page
            .children
            .into_iter()
            .next()
            .filter(|_| page.total.is_none_or(|t| pos < t))
        else {
            return Err(invalid(
                "inspector_id",
                format!("no {which} sibling: this is the last child"),
            ));
        };
        *self.top_mut() = Level::new(child.node, Some(child.key), pos, current.facet);
        match self.render().await {
            Ok(r) => Ok(r),
            Err(e) => {
                *self.top_mut() = current;
                Err(e)
            }
        }
    }

    /// Moves one page forward (+1) or back (-1).
    pub async fn turn_page(&mut self, delta: i64) -> ApiResult<Rendering> {
        let level = self.top().clone();
        let Some(target) = level.page.checked_add_signed(delta) else {
            return Err(invalid("inspector_id", "already on the first page"));
        };
        let page = self
            .fetch(
                &Level {
                    page: target,
                    ..level.clone()
                },
                target,
            )
            .await?;
        let size = self.settings.page_size;
        if target > 0
            && (page.children.is_empty()
                || page_count(page.total, size).is_some_and(|count| target >= count))
        {
            return Err(invalid(
                "inspector_id",
                match page_count(page.total, size) {
                    Some(count) => format!(
                        "page {} is past the end: the value has {count} page(s) of {size}",
                        target + 1
                    ),
                    None => format!("page {} is past the end", target + 1),
                },
            ));
        }
        self.top_mut().page = target;
        match self.render_with(page, Vec::new()).await {
            Ok(r) => Ok(r),
            Err(e) => {
                self.top_mut().page = level.page;
                Err(e)
            }
        }
    }

    /// Re-renders, applying the fields set in `config`.
    pub async fn refresh(&mut self, config: Option<&InspectorConfig>) -> ApiResult<Rendering> {
        let saved_settings = self.settings.clone();
        let saved_levels = self.stack.clone();
        if let Some(config) = config {
            let old_size = u64::from(self.settings.page_size);
            let view = self.settings.apply(config)?;
            let new_size = u64::from(self.settings.page_size);
            if new_size != old_size {
                // Keep each level's first visible child on screen.
                for level in &mut self.stack {
                    level.page = level.page * old_size / new_size;
                }
            }
            if let Some(view) = view
                && let Err(e) = self.set_view(view)
            {
                self.settings = saved_settings;
                self.stack = saved_levels;
                return Err(e);
            }
        }
        match self.render().await {
            Ok(r) => Ok(r),
            Err(e) => {
                self.settings = saved_settings;
                self.stack = saved_levels;
                Err(e)
            }
        }
    }

    /// Cycles NORMAL → TABLE → OBJECT over the modes the value supports.
    pub async fn toggle_view(&mut self) -> ApiResult<Rendering> {
        const CYCLE: [ViewMode; 3] = [ViewMode::Normal, ViewMode::Table, ViewMode::Object];
        let level = self.top().clone();
        let at = CYCLE.iter().position(|m| *m == level.view).unwrap_or(0);
        let next = (1..=3)
            .map(|i| CYCLE[(at + i) % 3])
            .find(|m| supports(level.node.as_ref(), *m))
            .unwrap_or(ViewMode::Normal);
        {
            let top = self.top_mut();
            top.view = next;
            top.page = 0;
        }
        match self.render().await {
            Ok(r) => Ok(r),
            Err(e) => {
                *self.top_mut() = level;
                Err(e)
            }
        }
    }

    /// Flips pretty printing.
    pub async fn toggle_pretty(&mut self) -> ApiResult<Rendering> {
        self.settings.pretty_print = !self.settings.pretty_print;
        match self.render().await {
            Ok(r) => Ok(r),
            Err(e) => {
                self.settings.pretty_print = !self.settings.pretty_print;
                Err(e)
            }
        }
    }

    /// The current level with analytics appended.
    pub async fn analytics(&mut self, cutoff: u64) -> ApiResult<(Rendering, u64, bool)> {
        let node = self.current();
        node.check()?;
        let a = analytics::analyse(node.as_ref(), cutoff).await?;
        let page = self.fetch(self.top(), self.top().page).await?;
        let rendering = self.render_with(page, a.lines).await?;
        Ok((rendering, a.analysed, a.cut_off))
    }
}

fn append(items: &mut Items, lines: Vec<String>) {
    for line in lines {
        items.line(line);
    }
}

/// Columns from the first row; each row's cells in that order.
async fn table(page: &Page) -> ApiResult<Table> {
    let mut columns: Vec<String> = Vec::new();
    let mut rows = Vec::new();
    let limits = super::value::PrintLimits::UNLIMITED;
    for (n, child) in page.children.iter().enumerate() {
        let idx = match child.key {
            Key::Index(i) => i,
            _ => n as u64,
        };
        let row = &child.node;
        let cells: Vec<(String, String)> = if row.shape() == Shape::Atom {
            vec![("value".to_owned(), row.repr(&limits))]
        } else {
            row.children(Facet::Contents, 0, MAX_COLUMNS)
                .await?
                .children
                .iter()
                .map(|c| (c.key.label(), c.node.repr(&limits)))
                .collect()
        };
        if n == 0 {
            columns = cells.iter().map(|(k, _)| k.clone()).collect();
        }
        let extra = cells.iter().filter(|(k, _)| !columns.contains(k)).count();
        let ordered = columns
            .iter()
            .map(|col| {
                cells
                    .iter()
                    .find(|(k, _)| k == col)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default()
            })
            .collect();
        rows.push((idx, ordered, extra));
    }
    Ok(Table { columns, rows })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inspector::{json_source::JsonNode, render::plain};
    use stepd_proto::v1::ErrorReason;

    fn inspector(value: serde_json::Value) -> Inspector {
        Inspector::new(
            "i-test".into(),
            String::new(),
            Arc::new(JsonNode::new(crate::json::to_value(&value))),
            Settings::default(),
        )
    }

    fn text(r: &Rendering) -> String {
        plain(&r.items)
    }

    #[tokio::test]
    async fn push_pop_siblings_and_paths() {
        let mut i = inspector(serde_json::json!({"users": [{"name": "ada"}, {"name": "bob"}]}));
        let root = i.render().await.unwrap();
        assert_eq!(root.path, "");
        assert_eq!(root.r#type, "object");
        let users = i.push(0).await.unwrap();
        assert_eq!(users.path, "[\"users\"]");
        let ada = i.push(0).await.unwrap();
        assert_eq!(ada.path, "[\"users\"][0]");
        assert!(text(&ada).contains("\"name\" = \"ada\""), "{}", text(&ada));
        let bob = i.sibling(1).await.unwrap();
        assert_eq!(bob.path, "[\"users\"][1]");
        let err = i.sibling(1).await.unwrap_err();
        assert_eq!(err.reason(), ErrorReason::InvalidArgument);
        let name = i.push(0).await.unwrap();
        assert_eq!(name.path, "[\"users\"][1][\"name\"]");
        assert_eq!(
            i.push(0).await.unwrap_err().reason(),
            ErrorReason::InvalidArgument
        );
        i.pop().await.unwrap();
        i.pop().await.unwrap();
        i.pop().await.unwrap();
        assert_eq!(
            i.pop().await.unwrap_err().reason(),
            ErrorReason::InvalidArgument
        );
        assert_eq!(
            i.sibling(1).await.unwrap_err().reason(),
            ErrorReason::InvalidArgument
        );
        assert_eq!(
            i.push(7).await.unwrap_err().reason(),
            ErrorReason::InvalidArgument
        );
    }

    #[tokio::test]
    async fn pages_are_remembered_per_level_and_checked() {
        let rows: Vec<serde_json::Value> = (0..70)
            .map(|n| serde_json::json!({"n": n, "even": n % 2 == 0}))
            .collect();
        let mut i = inspector(serde_json::json!({"rows": rows}));
        i.render().await.unwrap();
        assert_eq!(
            i.turn_page(1).await.unwrap_err().reason(),
            ErrorReason::InvalidArgument
        );
        assert_eq!(
            i.turn_page(-1).await.unwrap_err().reason(),
            ErrorReason::InvalidArgument
        );
        let list = i.push(0).await.unwrap();
        assert_eq!(list.page.as_ref().unwrap().page_count, Some(3));
        i.turn_page(1).await.unwrap();
        let last = i.turn_page(1).await.unwrap();
        assert_eq!(last.page.as_ref().unwrap().page, 2);
        assert!(text(&last).contains("[69]"));
        assert_eq!(
            i.turn_page(1).await.unwrap_err().reason(),
            ErrorReason::InvalidArgument
        );
        let table = i.toggle_view().await.unwrap();
        assert_eq!(table.view_mode, ViewMode::Table as i32);
        assert!(
            text(&table).contains("| \"even\" | \"n\""),
            "{}",
            text(&table)
        );
        i.turn_page(1).await.unwrap();
        let row = i.push(40).await.unwrap();
        assert_eq!(row.view_mode, ViewMode::Normal as i32);
        assert_eq!(row.path, "[\"rows\"][40]");
        let back = i.pop().await.unwrap();
        assert_eq!(back.view_mode, ViewMode::Table as i32);
        assert_eq!(back.page.as_ref().unwrap().page, 1);
        // OBJECT does not apply to a list: the cycle goes back to NORMAL.
        let normal = i.toggle_view().await.unwrap();
        assert_eq!(normal.view_mode, ViewMode::Normal as i32);
    }

    #[tokio::test]
    async fn refresh_changes_the_configuration_for_good() {
        let mut i = inspector(serde_json::json!((0..100).collect::<Vec<_>>()));
        i.render().await.unwrap();
        i.turn_page(1).await.unwrap();
        let r = i
            .refresh(Some(&InspectorConfig {
                page_size: Some(10),
                ..Default::default()
            }))
            .await
            .unwrap();
        assert_eq!(r.page.as_ref().unwrap().page, 3, "item 32 stays on screen");
        assert_eq!(r.page.as_ref().unwrap().page_count, Some(10));
        let again = i.refresh(None).await.unwrap();
        assert_eq!(again.config.unwrap().page_size, Some(10));
        let err = i
            .refresh(Some(&InspectorConfig {
                view_mode: ViewMode::Object.into(),
                ..Default::default()
            }))
            .await
            .unwrap_err();
        assert_eq!(err.reason(), ErrorReason::InvalidArgument);
        assert_eq!(i.settings().page_size, 10);
    }

    #[tokio::test]
    async fn only_diff_hides_what_did_not_change() {
        let mut i = inspector(serde_json::json!([1, 2, 3]));
        i.render().await.unwrap();
        let r = i
            .refresh(Some(&InspectorConfig {
                only_diff: Some(true),
                ..Default::default()
            }))
            .await
            .unwrap();
        assert!(
            text(&r).contains("(3 unchanged, not shown)"),
            "{}",
            text(&r)
        );
    }

    #[tokio::test]
    async fn pretty_printing_toggles() {
        let mut i = inspector(serde_json::json!({"a": [1]}));
        let r = i.toggle_pretty().await.unwrap();
        assert!(
            text(&r).contains("Value: {\n  \"a\": [\n    1\n  ]\n}"),
            "{}",
            text(&r)
        );
        assert_eq!(r.config.unwrap().pretty_print, Some(true));
    }
}
