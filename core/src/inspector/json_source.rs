//! Probe values: `google.protobuf.Value` trees (and any JSON the daemon
//! builds itself, e.g. an adapter's exception details). The tree is shared;
//! a node is the tree plus the path to one value in it.

use std::{fmt::Write, sync::Arc};

use prost_types::{Value, value::Kind};

use super::value::{Child, Facet, Key, Node, Page, PrintLimits, Scalar, Shape};
use crate::error::ApiResult;

#[derive(Debug, Clone)]
enum Step {
    Index(usize),
    Key(String),
}

/// One value inside a shared JSON tree.
#[derive(Clone)]
pub struct JsonNode {
    root: Arc<Value>,
    path: Vec<Step>,
    guard: Option<Arc<dyn Fn() -> ApiResult<()> + Send + Sync>>,
}

impl JsonNode {
    /// The root of a tree.
    pub fn new(root: Value) -> Self {
        Self {
            root: Arc::new(root),
            path: Vec::new(),
            guard: None,
        }
    }

    /// A root whose validity depends on something else (e.g. a stop).
    pub fn guarded(root: Value, guard: Arc<dyn Fn() -> ApiResult<()> + Send + Sync>) -> Self {
        Self {
            guard: Some(guard),
            ..Self::new(root)
        }
    }

    fn value(&self) -> &Value {
        let mut v = self.root.as_ref();
        for step in &self.path {
            let next = match (step, &v.kind) {
                (Step::Index(i), Some(Kind::ListValue(l))) => l.values.get(*i),
                (Step::Key(k), Some(Kind::StructValue(s))) => s.fields.get(k),
                _ => None,
            };
            match next {
                Some(n) => v = n,
                None => return &NULL,
            }
        }
        v
    }

    fn child(&self, step: Step) -> Arc<dyn Node> {
        let mut path = self.path.clone();
        path.push(step);
        Arc::new(Self {
            root: self.root.clone(),
            path,
            guard: self.guard.clone(),
        })
    }
}

static NULL: Value = Value { kind: None };

fn type_of(v: &Value) -> &'static str {
    match &v.kind {
        None | Some(Kind::NullValue(_)) => "null",
        Some(Kind::BoolValue(_)) => "bool",
        Some(Kind::NumberValue(_)) => "number",
        Some(Kind::StringValue(_)) => "string",
        Some(Kind::ListValue(_)) => "list",
        Some(Kind::StructValue(_)) => "object",
    }
}

fn number(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

fn quoted(s: &str, max: Option<usize>) -> String {
    let cut = max.filter(|m| s.chars().count() > *m);
    let body: String = match cut {
        Some(m) => s.chars().take(m).collect(),
        None => s.to_owned(),
    };
    let mut out = serde_json::to_string(&body).unwrap_or_default();
    if cut.is_some() {
        out.insert(out.len() - 1, '…');
    }
    out
}

/// Limits of one printing: `None` fields print everything.
#[derive(Clone, Copy)]
struct Limits {
    coll: Option<usize>,
    depth: Option<usize>,
    atom: Option<usize>,
    pretty: bool,
}

fn print(v: &Value, l: &Limits, depth: usize, out: &mut String) {
    let indent = |out: &mut String, d: usize| {
        if l.pretty {
            out.push('\n');
            out.push_str(&"  ".repeat(d));
        }
    };
    match &v.kind {
        None | Some(Kind::NullValue(_)) => out.push_str("null"),
        Some(Kind::BoolValue(b)) => out.push_str(if *b { "true" } else { "false" }),
        Some(Kind::NumberValue(n)) => out.push_str(&number(*n)),
        Some(Kind::StringValue(s)) => out.push_str(&quoted(s, l.atom)),
        Some(Kind::ListValue(list)) => {
            if list.values.is_empty() {
                out.push_str("[]");
                return;
            }
            if l.depth.is_some_and(|d| depth >= d) {
                out.push_str("[…]");
                return;
            }
            out.push('[');
            let shown = l.coll.unwrap_or(usize::MAX).min(list.values.len());
            for (i, item) in list.values.iter().take(shown).enumerate() {
                if i > 0 {
                    out.push(',');
                    if !l.pretty {
                        out.push(' ');
                    }
                }
                indent(out, depth + 1);
                print(item, l, depth + 1, out);
            }
            if shown < list.values.len() {
                out.push_str(if l.pretty { "," } else { ", " });
                indent(out, depth + 1);
                let _ = write!(out, "… {} more", list.values.len() - shown);
            }
            indent(out, depth);
            out.push(']');
        }
        Some(Kind::StructValue(s)) => {
            if s.fields.is_empty() {
                out.push_str("{}");
                return;
            }
            if l.depth.is_some_and(|d| depth >= d) {
                out.push_str("{…}");
                return;
            }
            out.push('{');
            let shown = l.coll.unwrap_or(usize::MAX).min(s.fields.len());
            for (i, (k, item)) in s.fields.iter().take(shown).enumerate() {
                if i > 0 {
                    out.push(',');
                    if !l.pretty {
                        out.push(' ');
                    }
                }
                indent(out, depth + 1);
                out.push_str(&quoted(k, None));
                out.push_str(": ");
                print(item, l, depth + 1, out);
            }
            if shown < s.fields.len() {
                out.push_str(if l.pretty { "," } else { ", " });
                indent(out, depth + 1);
                let _ = write!(out, "… {} more", s.fields.len() - shown);
            }
            indent(out, depth);
            out.push('}');
        }
    }
}

#[async_trait::async_trait]
impl Node for JsonNode {
    fn repr(&self, limits: &PrintLimits) -> String {
        let mut out = String::new();
        print(
            self.value(),
            &Limits {
                coll: Some(limits.max_coll_size),
                depth: limits.max_nested_depth,
                atom: Some(limits.max_atom_length),
                pretty: limits.pretty,
            },
            0,
            &mut out,
        );
        out
    }

    fn type_name(&self) -> String {
        type_of(self.value()).to_owned()
    }

    fn shape(&self) -> Shape {
        match &self.value().kind {
            Some(Kind::ListValue(_)) => Shape::Sequence,
            Some(Kind::StructValue(_)) => Shape::Map,
            _ => Shape::Atom,
        }
    }

    fn has_fields(&self) -> bool {
        matches!(self.value().kind, Some(Kind::StructValue(_)))
    }

    fn check(&self) -> ApiResult<()> {
        self.guard.as_ref().map_or(Ok(()), |g| g())
    }

    async fn children(&self, facet: Facet, start: u64, count: u64) -> ApiResult<Page> {
        let end = start.saturating_add(count);
        let page = match &self.value().kind {
            Some(Kind::ListValue(l)) if facet == Facet::Contents => {
                let total = l.values.len() as u64;
                Page {
                    children: (start..end.min(total))
                        .map(|i| Child {
                            key: Key::Index(i),
                            node: self.child(Step::Index(i as usize)),
                        })
                        .collect(),
                    total: Some(total),
                    indexed: Some(total),
                    named: Some(0),
                }
            }
            Some(Kind::StructValue(s)) => {
                let total = s.fields.len() as u64;
                Page {
                    children: s
                        .fields
                        .keys()
                        .skip(start.min(total) as usize)
                        .take((end.min(total) - start.min(total)) as usize)
                        .map(|k| Child {
                            key: if facet == Facet::Fields {
                                Key::Field(k.clone())
                            } else {
                                Key::Entry(quoted(k, None))
                            },
                            node: self.child(Step::Key(k.clone())),
                        })
                        .collect(),
                    total: Some(total),
                    indexed: Some(0),
                    named: Some(total),
                }
            }
            _ => Page {
                total: Some(0),
                ..Page::default()
            },
        };
        Ok(page)
    }

    async fn print(&self, limits: &PrintLimits) -> ApiResult<String> {
        let mut out = String::new();
        print(
            self.value(),
            &Limits {
                coll: None,
                depth: None,
                atom: None,
                pretty: limits.pretty,
            },
            0,
            &mut out,
        );
        Ok(out)
    }

    fn scalar(&self) -> Scalar {
        match &self.value().kind {
            None | Some(Kind::NullValue(_)) => Scalar::Null,
            Some(Kind::BoolValue(b)) => Scalar::Bool(*b),
            Some(Kind::NumberValue(n)) => Scalar::Number(*n),
            Some(Kind::StringValue(s)) => Scalar::Text(s.clone()),
            _ => Scalar::Other,
        }
    }

    fn known_size(&self) -> Option<u64> {
        match &self.value().kind {
            Some(Kind::ListValue(l)) => Some(l.values.len() as u64),
            Some(Kind::StructValue(s)) => Some(s.fields.len() as u64),
            _ => None,
        }
    }

    fn chunk(&self) -> u64 {
        1000
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> PrintLimits {
        PrintLimits {
            max_coll_size: 5,
            max_nested_depth: None,
            max_atom_length: 150,
            pretty: false,
        }
    }

    fn sample() -> JsonNode {
        JsonNode::new(crate::json::to_value(&serde_json::json!({
            "users": [{"name": "ada", "age": 36}, {"name": "bob"}],
            "n": null,
            "big": (0..20).collect::<Vec<_>>(),
        })))
    }

    #[tokio::test]
    async fn walks_maps_and_lists() {
        let root = sample();
        assert_eq!(root.shape(), Shape::Map);
        let page = root.children(Facet::Contents, 0, 10).await.unwrap();
        assert_eq!(page.total, Some(3));
        let keys: Vec<String> = page.children.iter().map(|c| c.key.segment()).collect();
        assert_eq!(keys, ["[\"big\"]", "[\"n\"]", "[\"users\"]"]);
        let users = page.children[2].node.clone();
        assert_eq!(users.shape(), Shape::Sequence);
        let first = users.children(Facet::Contents, 0, 1).await.unwrap();
        assert_eq!(first.total, Some(2));
        assert_eq!(first.children[0].key, Key::Index(0));
        let ada = &first.children[0].node;
        assert_eq!(ada.repr(&limits()), "{\"age\": 36, \"name\": \"ada\"}");
        let name = ada.children(Facet::Contents, 1, 1).await.unwrap();
        assert_eq!(name.children[0].node.scalar(), Scalar::Text("ada".into()));
    }

    #[tokio::test]
    async fn pages_past_the_end_are_empty() {
        let big = sample()
            .children(Facet::Contents, 0, 1)
            .await
            .unwrap()
            .children[0]
            .node
            .clone();
        let page = big.children(Facet::Contents, 16, 8).await.unwrap();
        assert_eq!(page.children.len(), 4);
        assert_eq!(page.children[0].key, Key::Index(16));
        assert!(
            big.children(Facet::Contents, 40, 8)
                .await
                .unwrap()
                .children
                .is_empty()
        );
    }

    #[test]
    fn printing_honours_the_limits() {
        let root = sample();
        let short = root.repr(&limits());
        assert!(short.contains("… 15 more"), "{short}");
        let shallow = root.repr(&PrintLimits {
            max_nested_depth: Some(1),
            ..limits()
        });
        assert_eq!(shallow, "{\"big\": […], \"n\": null, \"users\": […]}");
        let cut =
            JsonNode::new(crate::json::to_value(&serde_json::json!("abcdef"))).repr(&PrintLimits {
                max_atom_length: 3,
                ..limits()
            });
        assert_eq!(cut, "\"abc…\"");
        let pretty = JsonNode::new(crate::json::to_value(&serde_json::json!({"a": [1, 2]}))).repr(
            &PrintLimits {
                pretty: true,
                ..limits()
            },
        );
        assert_eq!(pretty, "{\n  \"a\": [\n    1,\n    2\n  ]\n}");
    }

    #[tokio::test]
    async fn full_print_has_no_limits() {
        let text = sample().print(&limits()).await.unwrap();
        assert!(text.contains("19]"), "{text}");
        assert!(!text.contains('…'));
    }
}
