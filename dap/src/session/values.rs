//! Values of DAP sessions for the inspector: variables, scopes, evaluation
//! results and exception details, read through the session's adapter client.
//!
//! Paging uses the adapter's `start`/`count` on indexed children. debugpy
//! ignores them and answers every container with its first 100 children (plus
//! "special variables", `len()` and a `more` entry), so beyond those the
//! window is read with Python's own slicing through the value's
//! `evaluateName` (`big[3200:3232]`, or `itertools.islice` for sets, deques
//! and dict items), evaluated in the value's frame. Either way one page costs
//! a constant number of requests, whatever the size of the value.

use std::sync::Arc;

use serde_json::json;
use stepd_proto::v1::{ErrorReason, EvaluateContext, Variable, VariableFilter};

use super::{Shared, dap_error};
use crate::capability::Capability;
use crate::kind::AdapterKind;
use stepd_core::{
    error::{ApiError, ApiResult},
    inspector::{
        json_source::JsonNode,
        value::{
            Child, Facet, Key, Node, Page, PrintLimits, Scalar, Shape, StaticNode, scalar_of_repr,
            window,
        },
    },
    session::PauseTarget,
};

/// Most children debugpy returns for one container.
const DEBUGPY_CAP: u64 = 100;
/// Most children printed by PrintValue when the adapter cannot print a whole value.
const PRINT_MAX_CHILDREN: usize = 10_000;
/// Deepest nesting printed by PrintValue in that case.
const PRINT_MAX_DEPTH: usize = 8;

/// STALE_HANDLE unless the session is still at the stop `epoch`.
pub fn still_at(shared: &Shared, epoch: u64) -> ApiResult<()> {
    if shared.epoch() == epoch {
        Ok(())
    } else {
        Err(ApiError::new(
            ErrorReason::StaleHandle,
            format!(
                "the inspected value belongs to an earlier stop of session {}; the program has moved since",
                shared.id
            ),
        )
        .with("session_id", shared.id.clone()))
    }
}

/// A staleness guard for nodes built from one stop.
pub fn guard(shared: &Arc<Shared>, epoch: u64) -> Arc<dyn Fn() -> ApiResult<()> + Send + Sync> {
    let shared = shared.clone();
    Arc::new(move || still_at(&shared, epoch))
}

/// Whether children are paged with the language's slicing (debugpy).
fn pages_by_slicing(shared: &Shared) -> bool {
    shared.kind.pages_by_slicing()
}

/// Entries debugpy adds beside a container's children.
fn is_pseudo(v: &Variable) -> bool {
    matches!(
        v.name.as_str(),
        "special variables" | "function variables" | "class variables" | "protected variables"
    ) || v.name == "len()"
        || v.r#type.starts_with("MoreItems")
}

/// A Python string literal as printed by `repr` (debugpy's value of a `str`).
fn python_unquote(literal: &str) -> Option<String> {
    let quote = literal.chars().next().filter(|q| *q == '\'' || *q == '"')?;
    let body = literal.strip_prefix(quote)?.strip_suffix(quote)?;
    let mut out = String::with_capacity(body.len());
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let escaped = chars.next()?;
        let mut hex = |n: usize| -> Option<char> {
            let digits: String = chars.by_ref().take(n).collect();
            char::from_u32(u32::from_str_radix(&digits, 16).ok()?)
        };
        out.push(match escaped {
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            '0' => '\0',
            'x' => hex(2)?,
            'u' => hex(4)?,
            'U' => hex(8)?,
            other => other,
        });
    }
    Some(out)
}

fn python_shape(type_name: &str) -> Shape {
    match type_name {
        "list" | "tuple" | "range" | "deque" | "set" | "frozenset" | "bytearray" | "array" => {
            Shape::Sequence
        }
        "dict" | "OrderedDict" | "defaultdict" | "Counter" | "mappingproxy" | "ChainMap" => {
            Shape::Map
        }
        _ => Shape::Object,
    }
}

/// Whether Python's `x[a:b]` works on the type (else `itertools.islice`).
fn sliceable(type_name: &str) -> bool {
    matches!(
        type_name,
        "list" | "tuple" | "range" | "bytearray" | "array" | "str"
    )
}

/// `expr` ready to be indexed or called on.
fn operand(expr: &str) -> String {
    let simple = expr
        .chars()
        .all(|c| c.is_alphanumeric() || matches!(c, '_' | '.' | '[' | ']' | '\'' | '"'));
    if simple {
        expr.to_owned()
    } else {
        format!("({expr})")
    }
}

fn index_of(name: &str) -> Option<u64> {
    name.strip_prefix('[')?.strip_suffix(']')?.parse().ok()
}

/// What debugpy's listing of a container told: its length, whether it was
/// cut, how many children it listed. Fixed for one stop.
#[derive(Debug, Clone, Copy)]
struct Listing {
    len: Option<u64>,
    more: bool,
    items: u64,
}

/// A variable of a DAP session at one stop.
pub struct DapVar {
    shared: Arc<Shared>,
    epoch: u64,
    frame: String,
    var: Variable,
    listing: std::sync::OnceLock<Listing>,
}

impl DapVar {
    /// A node over a variable read at stop `epoch`, evaluated in `frame`
    /// (empty: the latest stop's top frame).
    pub fn new(shared: Arc<Shared>, epoch: u64, frame: String, var: Variable) -> Self {
        Self {
            shared,
            epoch,
            frame,
            var,
            listing: std::sync::OnceLock::new(),
        }
    }

    fn child(&self, key: Key, mut var: Variable, evaluate_name: Option<String>) -> Child {
        if let Some(name) = evaluate_name {
            var.evaluate_name = name;
        }
        Child {
            key,
            node: Arc::new(DapVar::new(
                self.shared.clone(),
                self.epoch,
                self.frame.clone(),
                var,
            )),
        }
    }

    async fn all(&self, filter: VariableFilter) -> ApiResult<Vec<Variable>> {
        self.shared
            .variables(&self.var.variables_ref, filter, 0, 0)
            .await
    }

    async fn debugpy_contents(&self, start: u64, count: u64) -> ApiResult<Page> {
        let shape = self.shape();
        let end = start.saturating_add(count);
        // Past what debugpy lists, a window known to need slicing skips the listing.
        let known = self
            .listing
            .get()
            .copied()
            .filter(|l| shape != Shape::Object && l.more && end > l.items);
        let (listing, items) = match known {
            Some(l) => (l, Vec::new()),
            None => {
                let all = self.all(VariableFilter::Unspecified).await?;
                let listing = Listing {
                    len: all
                        .iter()
                        .find(|v| v.name == "len()")
                        .and_then(|v| v.value.parse::<u64>().ok()),
                    more: all.iter().any(|v| v.r#type.starts_with("MoreItems")),
                    items: all.iter().filter(|v| !is_pseudo(v)).count() as u64,
                };
                let _ = self.listing.set(listing);
                (listing, all.into_iter().filter(|v| !is_pseudo(v)).collect())
            }
        };
        // debugpy's groups ("special variables", "function variables") and
        // its `len()` are not the value's: they count as neither elements
        // nor named children.
        let Listing {
            len,
            more,
            items: listed,
        } = listing;
        let total = match shape {
            Shape::Object => Some(listed),
            _ => len.or((!more).then_some(listed)),
        };
        let counts = |children| Page {
            children,
            total,
            indexed: (shape == Shape::Sequence).then_some(total).flatten(),
            named: Some(if shape == Shape::Sequence { 0 } else { listed }),
        };
        if known.is_none() && (shape == Shape::Object || !more || end <= listed) {
            let children = window(&items, start, count)
                .into_iter()
                .enumerate()
                .map(|(i, v)| {
                    let key = match shape {
                        Shape::Sequence => Key::Index(start + i as u64),
                        Shape::Map => Key::Entry(v.name.clone()),
                        _ => Key::Field(v.name.clone()),
                    };
                    self.child(key, v, None)
                })
                .collect();
            return Ok(counts(children));
        }
        let end = total.map_or(end, |t| end.min(t));
        if start >= end {
            return Ok(counts(Vec::new()));
        }
        let children = self.debugpy_slices(shape, start, end).await?;
        Ok(counts(children))
    }

    /// Children `start..end` of a container debugpy lists only the first
    /// children of, read by evaluating slices of it.
    async fn debugpy_slices(&self, shape: Shape, start: u64, end: u64) -> ApiResult<Vec<Child>> {
        if self.var.evaluate_name.is_empty() {
            return Err(ApiError::new(
                ErrorReason::UnsupportedByAdapter,
                format!(
                    "debugpy lists only the first {DEBUGPY_CAP} children of {:?} and gives no expression to slice it with",
                    self.var.name
                ),
            )
            .with("adapter", "debugpy"));
        }
        let expr = operand(&self.var.evaluate_name);
        let mut children = Vec::new();
        let mut from = start;
        while from < end {
            let to = end.min(from + DEBUGPY_CAP);
            let (window_expr, indexable) = match shape {
                Shape::Map => (
                    format!("dict(__import__('itertools').islice({expr}.items(), {from}, {to}))"),
                    true,
                ),
                _ if sliceable(&self.var.r#type) => (format!("{expr}[{from}:{to}]"), true),
                _ => (
                    format!("list(__import__('itertools').islice({expr}, {from}, {to}))"),
                    false,
                ),
            };
            let slice = self
                .shared
                .evaluate(&window_expr, &self.frame, EvaluateContext::Repl)
                .await?;
            if slice.variables_ref.is_empty() {
                break;
            }
            let got: Vec<Variable> = self
                .shared
                .variables(&slice.variables_ref, VariableFilter::Unspecified, 0, 0)
                .await?
                .into_iter()
                .filter(|v| !is_pseudo(v))
                .collect();
            if got.is_empty() {
                break;
            }
            let n = got.len() as u64;
            for (i, v) in got.into_iter().enumerate() {
                let index = from + i as u64;
                let child = if shape == Shape::Map {
                    let name = format!("{expr}[{}]", v.name);
                    self.child(Key::Entry(v.name.clone()), v, Some(name))
                } else {
                    let name = indexable.then(|| format!("{expr}[{index}]"));
                    self.child(Key::Index(index), v, name)
                };
                children.push(child);
            }
            from += n;
        }
        Ok(children)
    }

    async fn generic_contents(&self, start: u64, count: u64) -> ApiResult<Page> {
        let indexed = u64::from(self.var.indexed_variables);
        let named = Some(u64::from(self.var.named_variables));
        if indexed > 0 {
            let end = start.saturating_add(count).min(indexed);
            if start >= end {
                return Ok(Page {
                    total: Some(indexed),
                    indexed: Some(indexed),
                    named,
                    ..Page::default()
                });
            }
            let vars = self
                .shared
                .variables(
                    &self.var.variables_ref,
                    VariableFilter::Indexed,
                    start as u32,
                    (end - start) as u32,
                )
                .await?;
            let children = vars
                .into_iter()
                .take((end - start) as usize)
                .enumerate()
                .map(|(i, v)| self.child(Key::Index(start + i as u64), v, None))
                .collect();
            return Ok(Page {
                children,
                total: Some(indexed),
                indexed: Some(indexed),
                named,
            });
        }
        let all = self.all(VariableFilter::Unspecified).await?;
        let total = all.len() as u64;
        let positional = all.iter().filter(|v| index_of(&v.name).is_some()).count() as u64;
        let children = window(&all, start, count)
            .into_iter()
            .map(|v| {
                let key = match index_of(&v.name) {
                    Some(i) => Key::Index(i),
                    None => Key::Field(v.name.clone()),
                };
                self.child(key, v, None)
            })
            .collect();
        Ok(Page {
            children,
            total: Some(total),
            indexed: Some(positional),
            named: Some(total - positional),
        })
    }

    async fn fields(&self, start: u64, count: u64) -> ApiResult<Page> {
        let filter = if self.var.indexed_variables > 0 && self.var.named_variables > 0 {
            VariableFilter::Named
        } else {
            VariableFilter::Unspecified
        };
        let mut all = self.all(filter).await?;
        if pages_by_slicing(&self.shared) && self.shape() != Shape::Object {
            // Raw fields of a debugpy container: what it groups aside, not its elements.
            all.retain(is_pseudo);
        }
        let total = all.len() as u64;
        let children = window(&all, start, count)
            .into_iter()
            .map(|v| self.child(Key::Field(v.name.clone()), v, None))
            .collect();
        Ok(Page {
            children,
            total: Some(total),
            indexed: None,
            named: Some(total),
        })
    }
}

#[async_trait::async_trait]
impl Node for DapVar {
    fn repr(&self, _: &PrintLimits) -> String {
        self.var.value.clone()
    }

    fn type_name(&self) -> String {
        self.var.r#type.clone()
    }

    fn shape(&self) -> Shape {
        if self.var.variables_ref.is_empty() {
            Shape::Atom
        } else if pages_by_slicing(&self.shared) {
            python_shape(&self.var.r#type)
        } else if self.var.indexed_variables > 0 || self.var.r#type.ends_with(']') {
            Shape::Sequence
        } else {
            Shape::Object
        }
    }

    fn has_fields(&self) -> bool {
        !self.var.variables_ref.is_empty()
    }

    fn check(&self) -> ApiResult<()> {
        still_at(&self.shared, self.epoch)
    }

    async fn children(&self, facet: Facet, start: u64, count: u64) -> ApiResult<Page> {
        self.check()?;
        if self.var.variables_ref.is_empty() {
            return Ok(Page {
                total: Some(0),
                ..Page::default()
            });
        }
        match facet {
            Facet::Fields => self.fields(start, count).await,
            Facet::Contents if pages_by_slicing(&self.shared) => {
                self.debugpy_contents(start, count).await
            }
            Facet::Contents => self.generic_contents(start, count).await,
        }
    }

    async fn print(&self, _: &PrintLimits) -> ApiResult<String> {
        self.check()?;
        if self.var.variables_ref.is_empty() {
            return Ok(self.var.value.clone());
        }
        if pages_by_slicing(&self.shared)
            && !self.var.evaluate_name.is_empty()
            && self.shared.supports(Capability::ClipboardContext)
        {
            // debugpy's values are cut and nested ones elided even in the
            // clipboard context; `repr` of the value, as a string, is whole.
            let code = format!("repr({})", self.var.evaluate_name);
            let full = self
                .shared
                .evaluate(&code, &self.frame, EvaluateContext::Clipboard)
                .await?;
            return Ok(python_unquote(&full.value).unwrap_or(full.value));
        }
        let mut budget = PRINT_MAX_CHILDREN;
        self.print_within(0, &mut budget).await
    }

    async fn pin(&self, name: &str) -> ApiResult<String> {
        self.check()?;
        if self.var.evaluate_name.is_empty() {
            return Err(ApiError::new(
                ErrorReason::UnsupportedByAdapter,
                format!(
                    "{} gives no expression for {:?}, so it cannot be pinned",
                    self.shared.kind, self.var.name
                ),
            )
            .with("adapter", self.shared.kind.name()));
        }
        match self.shared.kind {
            AdapterKind::Debugpy => {
                // A builtin is visible from every module's frames, so later
                // Evaluate calls of the session find it wherever it stops.
                let code = format!(
                    "setattr(__import__('builtins'), {name:?}, {})",
                    operand(&self.var.evaluate_name)
                );
                self.shared
                    .evaluate(&code, &self.frame, EvaluateContext::Repl)
                    .await?;
                Ok(name.to_owned())
            }
            AdapterKind::Lldb => {
                // lldb keeps `$`-names as persistent expression variables for
                // the rest of the debug session; its console command defines one.
                let code = format!("`expr -- auto ${name} = {}", self.var.evaluate_name);
                let done = self
                    .shared
                    .evaluate(&code, &self.frame, EvaluateContext::Repl)
                    .await?;
                if done.value.contains("error:") {
                    return Err(ApiError::new(ErrorReason::AdapterError, done.value.trim()));
                }
                Ok(format!("${name}"))
            }
            other => Err(ApiError::new(
                ErrorReason::UnsupportedByAdapter,
                format!(
                    "{other} has no way to bind a value to a new name from outside the program"
                ),
            )
            .with("adapter", other.name())),
        }
    }

    fn scalar(&self) -> Scalar {
        if self.var.variables_ref.is_empty() {
            scalar_of_repr(&self.var.value, &self.var.r#type)
        } else {
            Scalar::Other
        }
    }

    fn known_size(&self) -> Option<u64> {
        (self.var.indexed_variables > 0).then_some(u64::from(self.var.indexed_variables))
    }

    async fn print_within(&self, depth: usize, budget: &mut usize) -> ApiResult<String> {
        if self.var.variables_ref.is_empty() || depth >= PRINT_MAX_DEPTH || *budget == 0 {
            return Ok(self.var.value.clone());
        }
        let page = self
            .children(Facet::Contents, 0, (*budget).min(PRINT_MAX_CHILDREN) as u64)
            .await?;
        let sequence = self.shape() == Shape::Sequence;
        let mut out = String::from(if sequence { "[" } else { "{" });
        for (i, child) in page.children.iter().enumerate() {
            if *budget == 0 {
                out.push_str(", …");
                break;
            }
            *budget -= 1;
            if i > 0 {
                out.push_str(", ");
            }
            if !sequence {
                out.push_str(&child.key.label());
                out.push_str(" = ");
            }
            out.push_str(&child.node.print_within(depth + 1, budget).await?);
        }
        out.push_str(if sequence { "]" } else { "}" });
        Ok(out)
    }
}

/// The scopes of a frame, each a navigable child.
pub async fn frame(
    shared: &Arc<Shared>,
    frame: &str,
    description: String,
) -> ApiResult<Arc<dyn Node>> {
    let epoch = shared.epoch();
    let scopes = shared.scopes(frame).await?;
    let children = scopes
        .into_iter()
        .map(|s| Child {
            key: Key::Field(s.name.clone()),
            node: Arc::new(DapVar::new(
                shared.clone(),
                epoch,
                frame.to_owned(),
                Variable {
                    value: s.name.clone(),
                    name: s.name,
                    r#type: "scope".into(),
                    variables_ref: s.variables_ref,
                    named_variables: s.named_variables,
                    indexed_variables: s.indexed_variables,
                    evaluate_name: String::new(),
                },
            )) as Arc<dyn Node>,
        })
        .collect();
    Ok(Arc::new(StaticNode {
        repr: description,
        type_name: "frame".into(),
        children,
        guard: Some(guard(shared, epoch)),
    }))
}

/// The locals of a frame: its first scope that is not expensive.
pub async fn locals(shared: &Arc<Shared>, frame: &str) -> ApiResult<Arc<dyn Node>> {
    let epoch = shared.epoch();
    let scopes = shared.scopes(frame).await?;
    let scope = scopes
        .iter()
        .find(|s| !s.expensive)
        .or(scopes.first())
        .cloned()
        .ok_or_else(|| {
            ApiError::new(
                ErrorReason::UnsupportedByAdapter,
                format!("{} reports no scopes for this frame", shared.kind),
            )
        })?;
    Ok(Arc::new(DapVar::new(
        shared.clone(),
        epoch,
        frame.to_owned(),
        Variable {
            value: scope.name.clone(),
            name: scope.name,
            r#type: "locals".into(),
            variables_ref: scope.variables_ref,
            named_variables: scope.named_variables,
            indexed_variables: scope.indexed_variables,
            evaluate_name: String::new(),
        },
    )))
}

/// An expression evaluated in a frame (empty: the latest stop's top frame).
pub async fn expression(shared: &Arc<Shared>, frame: &str, code: &str) -> ApiResult<Arc<dyn Node>> {
    let epoch = shared.epoch();
    let mut var = shared
        .evaluate(code, frame, EvaluateContext::Unspecified)
        .await?;
    if var.evaluate_name.is_empty() {
        var.evaluate_name = code.to_owned();
    }
    Ok(Arc::new(DapVar::new(
        shared.clone(),
        epoch,
        frame.to_owned(),
        var,
    )))
}

/// A variable handle from ListScopes / ListVariables / Evaluate.
pub fn handle(shared: &Arc<Shared>, handle: &str) -> ApiResult<Arc<dyn Node>> {
    let epoch = handle
        .split_once('.')
        .and_then(|(e, _)| e.parse::<u64>().ok())
        .ok_or_else(|| {
            ApiError::invalid_field(
                "source.variables_ref",
                format!("{} is not a stepd handle", stepd_core::error::quote(handle)),
            )
        })?;
    still_at(shared, epoch)?;
    Ok(Arc::new(DapVar::new(
        shared.clone(),
        epoch,
        String::new(),
        Variable {
            name: handle.to_owned(),
            value: format!("variables {handle}"),
            variables_ref: handle.to_owned(),
            ..Default::default()
        },
    )))
}

/// The exception a stopped thread is paused on, from `exceptionInfo`.
pub async fn exception(shared: &Arc<Shared>, thread_id: i64) -> ApiResult<Arc<dyn Node>> {
    shared.require(Capability::ExceptionInfoRequest, "exception details")?;
    let epoch = shared.epoch();
    let body = shared
        .client()?
        .request("exceptionInfo", json!({"threadId": thread_id}))
        .await
        .map_err(|e| dap_error(&e))?;
    Ok(Arc::new(JsonNode::guarded(
        stepd_core::json::to_value(&body),
        guard(shared, epoch),
    )))
}

/// The root value of a pause's value, locals or an expression in its frame.
pub async fn pause_node(
    shared: &Arc<Shared>,
    pause: &stepd_proto::v1::Pause,
    target: &PauseTarget,
) -> ApiResult<Arc<dyn Node>> {
    let (frames, _) = shared.stack_trace(pause.thread_id, 0, 1).await?;
    let frame = frames.first().ok_or_else(|| {
        ApiError::new(
            ErrorReason::NotStopped,
            format!("thread {} has no frames", pause.thread_id),
        )
    })?;
    match target {
        PauseTarget::Locals => locals(shared, &frame.id).await,
        PauseTarget::Expression(code) => expression(shared, &frame.id, code).await,
        PauseTarget::Value => {
            if pause.reason == stepd_proto::v1::PauseReason::Exception as i32
                && shared.supports(Capability::ExceptionInfoRequest)
            {
                return exception(shared, pause.thread_id).await;
            }
            if let Some(shown) = pause.debug_value.as_ref().filter(|v| !v.text.is_empty()) {
                // The pause shows a value (an EVAL result): that is what it is on.
                let epoch = shared.epoch();
                return Ok(Arc::new(StaticNode {
                    repr: shown.text.clone(),
                    type_name: shown.r#type.clone(),
                    children: Vec::new(),
                    guard: Some(guard(shared, epoch)),
                }));
            }
            let at = frame
                .location
                .as_ref()
                .map(|l| format!("{} at {}:{}", frame.name, l.path, l.line))
                .unwrap_or_else(|| frame.name.clone());
            self::frame(shared, &frame.id, at).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_operands_and_shapes() {
        assert_eq!(operand("big"), "big");
        assert_eq!(operand("nested['a']"), "nested['a']");
        assert_eq!(operand("a + b"), "(a + b)");
        assert_eq!(python_shape("list"), Shape::Sequence);
        assert_eq!(python_shape("dict"), Shape::Map);
        assert_eq!(python_shape("Point"), Shape::Object);
        assert!(sliceable("tuple") && !sliceable("set"));
        assert_eq!(index_of("[12]"), Some(12));
        assert_eq!(index_of("x"), None);
        assert_eq!(
            python_unquote(r#""[1, 'a\\'b', \"q\"]\n\x41\u00e9""#).as_deref(),
            Some("[1, 'a\\'b', \"q\"]\nAé")
        );
        assert_eq!(python_unquote("abc"), None);
    }
}
