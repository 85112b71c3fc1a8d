//! The inspector's side of redaction: every node an inspector shows is seen
//! through [`Redacted`], so a child whose name matches a `--redact` pattern
//! reads as the mask (and has no children to open), and printed values lose
//! the values that follow matching names.

use std::sync::Arc;

use crate::{
    error::ApiResult,
    redact::{MASK, Redactor},
};

use super::value::{Facet, Node, Page, PrintLimits, Scalar, Shape};

/// `node` as the inspector may show it.
pub fn wrap(node: Arc<dyn Node>, redactor: &Arc<Redactor>) -> Arc<dyn Node> {
    if redactor.is_active() {
        Arc::new(Redacted {
            inner: node,
            redactor: redactor.clone(),
        })
    } else {
        node
    }
}

struct Redacted {
    inner: Arc<dyn Node>,
    redactor: Arc<Redactor>,
}

/// A masked value.
struct Masked;

#[async_trait::async_trait]
impl Node for Redacted {
    fn repr(&self, limits: &PrintLimits) -> String {
        self.redactor.text(&self.inner.repr(limits)).into_owned()
    }
    fn type_name(&self) -> String {
        self.inner.type_name()
    }
    fn shape(&self) -> Shape {
        self.inner.shape()
    }
    fn has_fields(&self) -> bool {
        self.inner.has_fields()
    }
    fn check(&self) -> ApiResult<()> {
        self.inner.check()
    }
    async fn children(&self, facet: Facet, start: u64, count: u64) -> ApiResult<Page> {
        let mut page = self.inner.children(facet, start, count).await?;
        for child in &mut page.children {
            child.node = if self.redactor.name(&child.key.label()) {
                Arc::new(Masked)
            } else {
                wrap(child.node.clone(), &self.redactor)
            };
        }
        Ok(page)
    }
    async fn print(&self, limits: &PrintLimits) -> ApiResult<String> {
        let printed = self.inner.print(limits).await?;
        Ok(self.redactor.text(&printed).into_owned())
    }
    async fn pin(&self, name: &str) -> ApiResult<String> {
        self.inner.pin(name).await
    }
    async fn print_within(&self, depth: usize, budget: &mut usize) -> ApiResult<String> {
        let printed = self.inner.print_within(depth, budget).await?;
        Ok(self.redactor.text(&printed).into_owned())
    }
    fn scalar(&self) -> Scalar {
        self.inner.scalar()
    }
    fn known_size(&self) -> Option<u64> {
        self.inner.known_size()
    }
    fn chunk(&self) -> u64 {
        self.inner.chunk()
    }
}

#[async_trait::async_trait]
impl Node for Masked {
    fn repr(&self, _: &PrintLimits) -> String {
        MASK.to_owned()
    }
    fn type_name(&self) -> String {
        "redacted".to_owned()
    }
    fn shape(&self) -> Shape {
        Shape::Atom
    }
    async fn children(&self, _: Facet, _: u64, _: u64) -> ApiResult<Page> {
        Ok(Page::default())
    }
    async fn print(&self, _: &PrintLimits) -> ApiResult<String> {
        Ok(MASK.to_owned())
    }
}
