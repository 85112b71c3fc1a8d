//! The value-source abstraction: every inspected value, whatever it comes
//! from (a debug adapter's variables, a probe's JSON, a synthetic list of
//! scopes), is a [`Node`] that can describe itself and list a window of its
//! children. A node holds only how to reach its value, never the children, so
//! an inspector's memory does not grow with the size of what it shows.

use std::sync::Arc;

use stepd_proto::v1::ErrorReason;

use crate::error::{ApiError, ApiResult};

/// What a value looks like to the renderer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// No children.
    Atom,
    /// Children by position.
    Sequence,
    /// Children by key.
    Map,
    /// Children by field or attribute name.
    Object,
}

/// Which children a listing asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Facet {
    /// The natural children: elements, entries, fields.
    Contents,
    /// Raw fields or attributes (OBJECT view), including what the adapter
    /// groups aside (debugpy's "special variables", `len()`).
    Fields,
}

/// How a child is reached from its parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Key {
    /// Position in a sequence.
    Index(u64),
    /// A map key, printed (`'a'`, `"name"`, `3`).
    Entry(String),
    /// A field or attribute name.
    Field(String),
}

impl Key {
    /// The key as a segment of a path from the root: `[2]`, `["name"]`, `.x`.
    pub fn segment(&self) -> String {
        match self {
            Key::Index(i) => format!("[{i}]"),
            Key::Entry(k) => format!("[{k}]"),
            Key::Field(f) if f.starts_with('[') => f.clone(),
            Key::Field(f) => format!(".{f}"),
        }
    }

    /// The key as shown before a child in a rendering.
    pub fn label(&self) -> String {
        match self {
            Key::Index(i) => format!("[{i}]"),
            Key::Entry(k) | Key::Field(k) => k.clone(),
        }
    }
}

/// One child of a node.
#[derive(Clone, Debug)]
pub struct Child {
    /// How it is reached.
    pub key: Key,
    /// The child itself.
    pub node: Arc<dyn Node>,
}

/// A window of children.
#[derive(Clone, Default, Debug)]
pub struct Page {
    /// The children, in order.
    pub children: Vec<Child>,
    /// Number of children of this facet, when known.
    pub total: Option<u64>,
    /// Indexed (positional) children, when the source reports it.
    pub indexed: Option<u64>,
    /// Named children (fields, attributes, pseudo entries), when the source reports it.
    pub named: Option<u64>,
}

/// Limits applied when a node prints itself (only sources that print
/// themselves use them; adapters print their own values).
#[derive(Debug, Clone, Copy)]
pub struct PrintLimits {
    /// Elements printed of a nested collection.
    pub max_coll_size: usize,
    /// Nesting printed before "…".
    pub max_nested_depth: Option<usize>,
    /// Longest printed atom.
    pub max_atom_length: usize,
    /// Pretty-print over several lines.
    pub pretty: bool,
}

impl PrintLimits {
    /// No limits.
    pub const UNLIMITED: Self = Self {
        max_coll_size: usize::MAX,
        max_nested_depth: None,
        max_atom_length: usize::MAX,
        pretty: false,
    };
}

/// A numeric or textual reading of an atom, for analytics.
#[derive(Debug, Clone, PartialEq)]
pub enum Scalar {
    /// A number.
    Number(f64),
    /// A string (its content, without quotes).
    Text(String),
    /// A boolean.
    Bool(bool),
    /// Nothing (null, None).
    Null,
    /// Something else.
    Other,
}

/// A value that can be inspected.
#[async_trait::async_trait]
pub trait Node: Send + Sync {
    /// The value printed on one line, within the limits where the source
    /// prints itself.
    fn repr(&self, limits: &PrintLimits) -> String;
    /// Type name, when known.
    fn type_name(&self) -> String;
    /// Shape.
    fn shape(&self) -> Shape;
    /// Whether an OBJECT view (raw fields) exists.
    fn has_fields(&self) -> bool {
        false
    }
    /// Fails with STALE_HANDLE when the program moved on since the value was read.
    fn check(&self) -> ApiResult<()> {
        Ok(())
    }
    /// Children `[start, start + count)` of a facet.
    async fn children(&self, facet: Facet, start: u64, count: u64) -> ApiResult<Page>;
    /// The whole value printed, for PrintValue.
    async fn print(&self, limits: &PrintLimits) -> ApiResult<String>;
    /// Binds the value to `name` for later evaluations of its session and
    /// returns the name as those evaluations spell it.
    async fn pin(&self, name: &str) -> ApiResult<String> {
        Err(ApiError::new(
            ErrorReason::UnsupportedByAdapter,
            format!(
                "this value cannot be pinned as {}: its source has no evaluator",
                crate::error::quote(name)
            ),
        ))
    }
    /// The value printed within a budget of children shared with its
    /// parent (for adapters that cannot print a whole value themselves).
    async fn print_within(&self, _depth: usize, _budget: &mut usize) -> ApiResult<String> {
        Ok(self.repr(&PrintLimits::UNLIMITED))
    }
    /// The value read as a scalar, for analytics.
    fn scalar(&self) -> Scalar {
        Scalar::Other
    }
    /// Number of children when known without asking anyone (analytics).
    fn known_size(&self) -> Option<u64> {
        None
    }
    /// How many children analytics should fetch per request.
    fn chunk(&self) -> u64 {
        100
    }
}

impl std::fmt::Debug for dyn Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Node({})", self.type_name())
    }
}

/// Reads a printed value (as adapters print them) as a scalar.
pub fn scalar_of_repr(repr: &str, type_name: &str) -> Scalar {
    let t = repr.trim();
    match t {
        "None" | "null" | "nil" | "NULL" => return Scalar::Null,
        "True" | "true" => return Scalar::Bool(true),
        "False" | "false" => return Scalar::Bool(false),
        _ => {}
    }
    if let Ok(n) = t.parse::<f64>() {
        return Scalar::Number(n);
    }
    for q in ['\'', '"'] {
        if t.len() >= 2 && t.starts_with(q) && t.ends_with(q) {
            return Scalar::Text(t[1..t.len() - 1].to_owned());
        }
    }
    // lldb prints C strings as `0x... "text"`.
    if let Some(pos) = t.find(" \"")
        && t.ends_with('"')
        && t.starts_with("0x")
    {
        return Scalar::Text(t[pos + 2..t.len() - 1].to_owned());
    }
    if matches!(type_name, "str" | "string") {
        return Scalar::Text(t.to_owned());
    }
    Scalar::Other
}

/// A node with a fixed, small list of children (a frame's scopes, a pause's
/// display value).
pub struct StaticNode {
    /// Printed value.
    pub repr: String,
    /// Type name.
    pub type_name: String,
    /// Children.
    pub children: Vec<Child>,
    /// Staleness check shared with the children's source, if any.
    pub guard: Option<Arc<dyn Fn() -> ApiResult<()> + Send + Sync>>,
}

#[async_trait::async_trait]
impl Node for StaticNode {
    fn repr(&self, _: &PrintLimits) -> String {
        self.repr.clone()
    }
    fn type_name(&self) -> String {
        self.type_name.clone()
    }
    fn shape(&self) -> Shape {
        if self.children.is_empty() {
            Shape::Atom
        } else {
            Shape::Object
        }
    }
    fn check(&self) -> ApiResult<()> {
        self.guard.as_ref().map_or(Ok(()), |g| g())
    }
    async fn children(&self, _: Facet, start: u64, count: u64) -> ApiResult<Page> {
        let total = self.children.len() as u64;
        Ok(Page {
            children: window(&self.children, start, count),
            total: Some(total),
            indexed: None,
            named: Some(total),
        })
    }
    async fn print(&self, limits: &PrintLimits) -> ApiResult<String> {
        if self.children.is_empty() {
            return Ok(self.repr.clone());
        }
        let mut out = String::from("{");
        for (i, c) in self.children.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            out.push_str(&c.key.label());
            out.push_str(": ");
            out.push_str(&c.node.repr(limits));
        }
        out.push('}');
        Ok(out)
    }
    fn scalar(&self) -> Scalar {
        if self.children.is_empty() {
            scalar_of_repr(&self.repr, &self.type_name)
        } else {
            Scalar::Other
        }
    }
    fn known_size(&self) -> Option<u64> {
        (!self.children.is_empty()).then_some(self.children.len() as u64)
    }
}

/// `items[start .. start + count]`, clamped.
pub fn window<T: Clone>(items: &[T], start: u64, count: u64) -> Vec<T> {
    let len = items.len() as u64;
    let from = start.min(len) as usize;
    let to = start.saturating_add(count).min(len) as usize;
    items[from..to].to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_print_as_path_segments() {
        assert_eq!(Key::Index(2).segment(), "[2]");
        assert_eq!(Key::Entry("\"users\"".into()).segment(), "[\"users\"]");
        assert_eq!(Key::Field("x".into()).segment(), ".x");
        assert_eq!(Key::Field("[3]".into()).segment(), "[3]");
    }

    #[test]
    fn reprs_read_as_scalars() {
        assert_eq!(scalar_of_repr("42", "int"), Scalar::Number(42.0));
        assert_eq!(scalar_of_repr("'ab'", "str"), Scalar::Text("ab".into()));
        assert_eq!(
            scalar_of_repr("0x0000 \"origin\"", "const char *"),
            Scalar::Text("origin".into())
        );
        assert_eq!(scalar_of_repr("None", "NoneType"), Scalar::Null);
        assert_eq!(scalar_of_repr("[1, 2]", "list"), Scalar::Other);
    }

    #[test]
    fn windows_clamp() {
        let v = vec![1, 2, 3];
        assert_eq!(window(&v, 1, 5), vec![2, 3]);
        assert!(window(&v, 7, 5).is_empty());
    }
}
