//! ShowAnalytics: statistics over the children of the current value, read
//! page by page up to a cutoff that is always reported.

use std::collections::{BTreeMap, HashMap};

use super::value::{Facet, Node, Scalar, Shape};
use crate::error::ApiResult;

/// Elements analysed when the request says 0.
pub const DEFAULT_CUTOFF: u64 = 100_000;
/// Records whose fields are read for per-key statistics (each may cost a
/// request to the adapter).
const MAX_RECORDS: u64 = 1000;
/// Fields read per record.
const MAX_KEYS: u64 = 64;

#[derive(Default)]
struct Numbers {
    count: u64,
    min: f64,
    max: f64,
    sum: f64,
    zeros: u64,
}

impl Numbers {
    fn add(&mut self, n: f64) {
        if self.count == 0 {
            self.min = n;
            self.max = n;
        }
        self.count += 1;
        self.min = self.min.min(n);
        self.max = self.max.max(n);
        self.sum += n;
        if n == 0.0 {
            self.zeros += 1;
        }
    }

    fn describe(&self) -> String {
        format!(
            "{}, min {}, max {}, mean {}, zeros {}",
            self.count,
            fmt(self.min),
            fmt(self.max),
            fmt(self.sum / self.count as f64),
            self.zeros
        )
    }
}

#[derive(Default)]
struct Sizes {
    count: u64,
    min: u64,
    max: u64,
    sum: u64,
}

impl Sizes {
    fn add(&mut self, n: u64) {
        if self.count == 0 {
            self.min = n;
            self.max = n;
        }
        self.count += 1;
        self.min = self.min.min(n);
        self.max = self.max.max(n);
        self.sum += n;
    }

    fn describe(&self) -> String {
        format!(
            "min {}, max {}, mean {}",
            self.min,
            self.max,
            fmt(self.sum as f64 / self.count as f64)
        )
    }
}

fn fmt(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        format!("{n:.3}")
    }
}

#[derive(Default)]
struct KeyStats {
    present: u64,
    types: BTreeMap<String, u64>,
    numbers: Numbers,
}

/// What ShowAnalytics answers.
pub struct Analytics {
    /// Elements analysed.
    pub analysed: u64,
    /// Whether the cutoff stopped the analysis early.
    pub cut_off: bool,
    /// Lines to display.
    pub lines: Vec<String>,
}

fn type_list(types: &BTreeMap<String, u64>) -> String {
    let mut by_count: Vec<(&String, &u64)> = types.iter().collect();
    by_count.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    by_count
        .iter()
        .take(10)
        .map(|(t, n)| format!("{} {n}", if t.is_empty() { "?" } else { t }))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What the analysed children add up to.
#[derive(Default)]
struct Tally {
    types: BTreeMap<String, u64>,
    seen: HashMap<String, u64>,
    numbers: Numbers,
    strings: u64,
    blank: u64,
    lengths: Sizes,
    collections: u64,
    sizes: Sizes,
    records: u64,
    keys: BTreeMap<String, KeyStats>,
}

impl Tally {
    /// Counts one child (and, for the first `MAX_RECORDS` records, its fields).
    async fn add(&mut self, n: &dyn Node) -> ApiResult<()> {
        *self.types.entry(n.type_name()).or_default() += 1;
        *self
            .seen
            .entry(n.repr(&super::value::PrintLimits::UNLIMITED))
            .or_default() += 1;
        match n.scalar() {
            Scalar::Number(x) => self.numbers.add(x),
            Scalar::Text(s) => {
                self.strings += 1;
                if s.trim().is_empty() {
                    self.blank += 1;
                }
                self.lengths.add(s.chars().count() as u64);
            }
            _ => {}
        }
        if n.shape() != Shape::Atom {
            self.collections += 1;
            if let Some(size) = n.known_size() {
                self.sizes.add(size);
            }
        }
        if matches!(n.shape(), Shape::Map | Shape::Object) && self.records < MAX_RECORDS {
            self.records += 1;
            let fields = n.children(Facet::Contents, 0, MAX_KEYS).await?;
            for f in &fields.children {
                let k = self.keys.entry(f.key.label()).or_default();
                k.present += 1;
                *k.types.entry(f.node.type_name()).or_default() += 1;
                if let Scalar::Number(x) = f.node.scalar() {
                    k.numbers.add(x);
                }
            }
        }
        Ok(())
    }

    /// The lines that describe `analysed` children, after the count.
    fn describe(&self, analysed: u64, lines: &mut Vec<String>) {
        lines.push(format!("  types: {}", type_list(&self.types)));
        let distinct = self.seen.len() as u64;
        let mut repeated: Vec<(&String, &u64)> =
            self.seen.iter().filter(|(_, n)| **n > 1).collect();
        repeated.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let top: Vec<String> = repeated
            .iter()
            .take(3)
            .map(|(v, n)| format!("{} ×{n}", super::render::cut(v, 40)))
            .collect();
        lines.push(format!(
            "  duplicates: {} ({distinct} distinct){}",
            analysed - distinct,
            if top.is_empty() {
                String::new()
            } else {
                format!("; most repeated: {}", top.join(", "))
            }
        ));
        if self.numbers.count > 0 {
            lines.push(format!("  numbers: {}", self.numbers.describe()));
        }
        if self.strings > 0 {
            lines.push(format!(
                "  strings: {}, blank {}, length {}",
                self.strings,
                self.blank,
                self.lengths.describe()
            ));
        }
        if self.collections > 0 {
            lines.push(if self.sizes.count > 0 {
                format!(
                    "  collections: {}, size {}",
                    self.collections,
                    self.sizes.describe()
                )
            } else {
                format!("  collections: {}, sizes unknown", self.collections)
            });
        }
        if self.records > 0 {
            let records = self.records;
            lines.push(format!("  records: per-key stats over {records} records"));
            for (k, s) in &self.keys {
                let mut line = format!(
                    "    {k}: in {} of {records}, types {}",
                    s.present,
                    type_list(&s.types)
                );
                if s.numbers.count > 0 {
                    line.push_str(&format!("; numbers {}", s.numbers.describe()));
                }
                lines.push(line);
            }
        }
    }
}

/// Analyses the children of `node`, at most `cutoff` of them.
pub async fn analyse(node: &dyn Node, cutoff: u64) -> ApiResult<Analytics> {
    let cutoff = if cutoff == 0 { DEFAULT_CUTOFF } else { cutoff };
    let mut analysed = 0u64;
    let mut total = None;
    let mut tally = Tally::default();
    let chunk = node.chunk().max(1);
    while analysed < cutoff {
        let page = node
            .children(Facet::Contents, analysed, chunk.min(cutoff - analysed))
            .await?;
        total = page.total;
        if page.children.is_empty() {
            break;
        }
        for child in &page.children {
            analysed += 1;
            tally.add(child.node.as_ref()).await?;
        }
        if total.is_some_and(|t| analysed >= t) {
            break;
        }
    }
    let cut_off = analysed >= cutoff
        && match total {
            Some(t) => t > analysed,
            None => !node
                .children(Facet::Contents, analysed, 1)
                .await?
                .children
                .is_empty(),
        };
    let mut lines = vec![match (cut_off, total) {
        (true, Some(t)) => {
            format!("--- Analytics: first {analysed} of {t} elements (cut off at {cutoff})")
        }
        (true, None) => format!("--- Analytics: first {analysed} elements (cut off at {cutoff})"),
        (false, _) => format!("--- Analytics: all {analysed} elements"),
    }];
    lines.push(format!("  count: {analysed}"));
    if analysed > 0 {
        tally.describe(analysed, &mut lines);
    }
    Ok(Analytics {
        analysed,
        cut_off,
        lines,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inspector::json_source::JsonNode;

    #[tokio::test]
    async fn numbers_strings_duplicates_and_records() {
        let node = JsonNode::new(crate::json::to_value(&serde_json::json!([
            0, 1, 1, 5, "", "ab", {"name": "ada", "age": 36}, {"name": "bob"}, [1, 2, 3]
        ])));
        let a = analyse(&node, 0).await.unwrap();
        assert_eq!(a.analysed, 9);
        assert!(!a.cut_off);
        let text = a.lines.join("\n");
        assert!(text.contains("all 9 elements"), "{text}");
        assert!(
            text.contains("numbers: 4, min 0, max 5, mean 1.750, zeros 1"),
            "{text}"
        );
        assert!(text.contains("strings: 2, blank 1"), "{text}");
        assert!(
            text.contains("duplicates: 1 (8 distinct); most repeated: 1 ×2"),
            "{text}"
        );
        assert!(text.contains("collections: 3, size min 1, max 3"), "{text}");
        assert!(
            text.contains("\"age\": in 1 of 2, types number 1; numbers 1, min 36"),
            "{text}"
        );
        assert!(
            text.contains("\"name\": in 2 of 2, types string 2"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn the_cutoff_is_reported() {
        let node = JsonNode::new(crate::json::to_value(&serde_json::json!(
            (0..5000).collect::<Vec<_>>()
        )));
        let a = analyse(&node, 1500).await.unwrap();
        assert_eq!(a.analysed, 1500);
        assert!(a.cut_off);
        assert!(a.lines[0].contains("first 1500 of 5000 elements (cut off at 1500)"));
    }
}
