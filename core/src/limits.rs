//! Size limits, in one place: how large each client-supplied string and value
//! may be, and how large a page of a listing or a part of a snapshot is (the
//! checks of headers and the remap of tonic's message-size refusal are the
//! API's, in `stepd::http_limits`).
//!
//! Every limit here is checked before the value is parsed or stored; a value
//! over one is refused with `RESOURCE_EXHAUSTED` / `LIMIT_EXCEEDED`, its
//! `ErrorInfo.metadata` naming the `limit`, its `max`, the `field` and the
//! value's `size`, and a `BadRequest` violation on the field. The table in
//! `docs/reliability.md` lists them.

use std::collections::HashMap;

use prost::Message;
use stepd_proto::v1::{
    AttachRequest, BreakpointSpec, DebugInput, DoctorRequest, EnlightenReport, EvalResult, Hello,
    Hit, LaunchRequest, ObservedReport, PointInfo, TraceReport, Watch, breakpoint_spec::Location,
    debug_command::Command, inject_command::Replacement,
};

use crate::error::{ApiError, ApiResult, FieldViolation};
use stepd_proto::v1::ErrorReason;

/// One named limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// Its name, as `ErrorInfo.metadata["limit"]` carries it.
    pub name: &'static str,
    /// The most allowed (bytes, or entries for `*_count` limits).
    pub max: usize,
}

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

/// A file path: a source breakpoint's, a program's, a working directory.
pub const PATH_BYTES: Limit = Limit {
    name: "path_bytes",
    max: 4 * KIB,
};
/// A name: a function, a session, a probe program, a point kind, an adapter,
/// an exception filter id, a client name, a variable.
pub const NAME_BYTES: Limit = Limit {
    name: "name_bytes",
    max: 4 * KIB,
};
/// A breakpoint condition (probe conditions and DAP conditions alike).
pub const CONDITION_BYTES: Limit = Limit {
    name: "condition_bytes",
    max: 4 * KIB,
};
/// A hit condition.
pub const HIT_CONDITION_BYTES: Limit = Limit {
    name: "hit_condition_bytes",
    max: 64,
};
/// A probe breakpoint's name glob (and a glob after `matches`).
pub const GLOB_BYTES: Limit = Limit {
    name: "glob_bytes",
    max: KIB,
};
/// A label selector.
pub const SELECTOR_BYTES: Limit = Limit {
    name: "selector_bytes",
    max: 4 * KIB,
};
/// A logpoint's message template.
pub const LOG_MESSAGE_BYTES: Limit = Limit {
    name: "log_message_bytes",
    max: 4 * KIB,
};
/// Exception filter ids of one breakpoint.
pub const FILTER_ID_COUNT: Limit = Limit {
    name: "filter_id_count",
    max: 64,
};
/// Labels of one session or probe.
pub const LABEL_COUNT: Limit = Limit {
    name: "label_count",
    max: 64,
};
/// Labels of one session or probe, keys and values together.
pub const LABELS_BYTES: Limit = Limit {
    name: "labels_bytes",
    max: 16 * KIB,
};
/// Arguments of a program (or of an adapter command).
pub const ARG_COUNT: Limit = Limit {
    name: "arg_count",
    max: 4096,
};
/// Arguments of a program (or of an adapter command), all together.
pub const ARGS_BYTES: Limit = Limit {
    name: "args_bytes",
    max: MIB,
};
/// Environment variables of a launch.
pub const ENV_COUNT: Limit = Limit {
    name: "env_count",
    max: 4096,
};
/// Environment variables of a launch, names and values together.
pub const ENV_BYTES: Limit = Limit {
    name: "env_bytes",
    max: MIB,
};
/// A launch's or attach's `adapter_options`, encoded.
pub const ADAPTER_OPTIONS_BYTES: Limit = Limit {
    name: "adapter_options_bytes",
    max: MIB,
};
/// A short token: a request id, a traceparent, an attach address.
pub const TOKEN_BYTES: Limit = Limit {
    name: "token_bytes",
    max: 512,
};
/// Code a debug input or `Evaluate` runs: EVAL, EXPRESSION, INSPECT_PROMPT,
/// INJECT as code.
pub const EXPRESSION_BYTES: Limit = Limit {
    name: "expression_bytes",
    max: 64 * KIB,
};
/// A value a client sets: INJECT's value (encoded), `SetVariable`'s value.
pub const VALUE_BYTES: Limit = Limit {
    name: "value_bytes",
    max: MIB,
};
/// A message an adapter or probe reports: an exception's message.
pub const MESSAGE_BYTES: Limit = Limit {
    name: "message_bytes",
    max: 64 * KIB,
};
/// A probe's `Hit` (or one report), encoded: a pause made of it always fits
/// in a snapshot part beside others, far below the message limit.
pub const HIT_BYTES: Limit = Limit {
    name: "hit_bytes",
    max: 4 * MIB,
};
/// Locals of one held point.
pub const LOCAL_COUNT: Limit = Limit {
    name: "local_count",
    max: 1024,
};
/// Frames of one held point's stack.
pub const FRAME_COUNT: Limit = Limit {
    name: "frame_count",
    max: 1024,
};
/// Entries of a coordinate or a scope path (how deeply points nest).
pub const DEPTH_COUNT: Limit = Limit {
    name: "depth_count",
    max: 1024,
};
/// Breakpoint ids one probe hit names.
pub const BREAKPOINT_ID_COUNT: Limit = Limit {
    name: "breakpoint_id_count",
    max: 1024,
};
/// Breakpoint ids one probe hit names, together.
pub const BREAKPOINT_IDS_BYTES: Limit = Limit {
    name: "breakpoint_ids_bytes",
    max: 64 * KIB,
};
/// Sessions one `Watch` follows.
pub const WATCH_SESSION_COUNT: Limit = Limit {
    name: "watch_session_count",
    max: 1024,
};
/// Sessions one `Watch` follows, their ids together.
pub const WATCH_SESSIONS_BYTES: Limit = Limit {
    name: "watch_sessions_bytes",
    max: 64 * KIB,
};

/// A request's headers (its gRPC metadata, and its path) together, each
/// counted as HTTP/2 counts it: name, value and 32 bytes. What HTTP/2 used
/// to allow, so no client that worked is refused.
pub const HEADER_BYTES: Limit = Limit {
    name: "header_bytes",
    max: 16 * KIB,
};
/// The `authorization` header: a stepd token is 70 bytes, so one far longer
/// is refused before it is hashed.
pub const AUTHORIZATION_BYTES: Limit = Limit {
    name: "authorization_bytes",
    max: 4 * KIB,
};

/// The largest page of a listing or part of a snapshot, in bytes: below the
/// 4 MiB that gRPC clients accept by default, and at most half the daemon's
/// message limit, so the rest of a response always fits beside it.
pub fn page_bytes(max_message_bytes: usize) -> usize {
    (2 * MIB).min(max_message_bytes / 2).max(1)
}

/// Sizes of a request, collected so one refusal names every field over.
#[derive(Debug, Default)]
pub struct Sizes {
    over: Vec<(String, Limit, usize)>,
}

impl Sizes {
    /// A string, in bytes of UTF-8.
    pub fn text(&mut self, field: &str, value: &str, limit: Limit) -> &mut Self {
        self.size(field, value.len(), limit)
    }

    /// Any measured size (bytes or entries).
    pub fn size(&mut self, field: &str, size: usize, limit: Limit) -> &mut Self {
        if size > limit.max {
            self.over.push((field.to_owned(), limit, size));
        }
        self
    }

    /// A message, by its encoded length.
    pub fn encoded(&mut self, field: &str, value: &impl Message, limit: Limit) -> &mut Self {
        self.size(field, value.encoded_len(), limit)
    }

    /// A list of strings: how many, and their bytes together.
    pub fn list(
        &mut self,
        field: &str,
        values: &[String],
        count: Limit,
        total: Limit,
    ) -> &mut Self {
        self.size(field, values.len(), count);
        self.size(field, values.iter().map(String::len).sum(), total)
    }

    /// A map of strings: how many entries, and keys and values together.
    pub fn map(
        &mut self,
        field: &str,
        values: &HashMap<String, String>,
        count: Limit,
        total: Limit,
    ) -> &mut Self {
        self.size(field, values.len(), count);
        self.size(
            field,
            values.iter().map(|(k, v)| k.len() + v.len()).sum(),
            total,
        )
    }

    /// Labels of a session or probe.
    pub fn labels(&mut self, field: &str, labels: &HashMap<String, String>) -> &mut Self {
        self.map(field, labels, LABEL_COUNT, LABELS_BYTES)
    }

    /// Makes the field names collected so far relative to `prefix` (an
    /// empty name is the prefix itself), which is only made when a field
    /// was over.
    pub fn within(&mut self, prefix: impl FnOnce() -> String) -> &mut Self {
        if !self.over.is_empty() {
            let prefix = prefix();
            for (field, _, _) in &mut self.over {
                *field = if field.is_empty() {
                    prefix.clone()
                } else {
                    format!("{prefix}.{field}")
                };
            }
        }
        self
    }

    /// Whether nothing was over.
    pub fn is_ok(&self) -> bool {
        self.over.is_empty()
    }

    /// `LIMIT_EXCEEDED` naming every field over its limit; metadata has the
    /// first one's `limit`, `max`, `field` and `size`.
    pub fn check(&self) -> ApiResult<()> {
        let Some((field, limit, size)) = self.over.first() else {
            return Ok(());
        };
        let message = self
            .over
            .iter()
            .map(|(f, l, s)| format!("{f}: {s} is over the limit {} of {}", l.name, l.max))
            .collect::<Vec<_>>()
            .join("; ");
        let violations = self
            .over
            .iter()
            .map(|(f, l, s)| {
                FieldViolation::new(
                    f.clone(),
                    format!("{s} is over the limit {} of {}", l.name, l.max),
                )
            })
            .collect();
        Err(ApiError::new(ErrorReason::LimitExceeded, message)
            .with("limit", limit.name)
            .with("max", limit.max.to_string())
            .with("field", field.clone())
            .with("size", size.to_string())
            .with_violations(violations))
    }
}

/// The sizes of a breakpoint spec, fields under `prefix` (e.g. "spec").
pub fn breakpoint_spec(spec: &BreakpointSpec, prefix: &str) -> Sizes {
    let mut sizes = Sizes::default();
    let f = |name: &str| format!("{prefix}.{name}");
    match &spec.location {
        Some(Location::Source(src)) => {
            sizes.text(&f("source.path"), &src.path, PATH_BYTES);
        }
        Some(Location::Function(func)) => {
            sizes.text(&f("function.name"), &func.name, NAME_BYTES);
        }
        Some(Location::Exception(e)) => {
            sizes.size(
                &f("exception.filter_ids"),
                e.filter_ids.len(),
                FILTER_ID_COUNT,
            );
            if let Some(long) = e.filter_ids.iter().map(String::len).max() {
                sizes.size(&f("exception.filter_ids"), long, NAME_BYTES);
            }
        }
        Some(Location::Probe(p)) => {
            sizes.text(&f("probe.point_kind"), &p.point_kind, NAME_BYTES);
            sizes.text(&f("probe.name_glob"), &p.name_glob, GLOB_BYTES);
        }
        Some(Location::Data(d)) => {
            sizes.text(&f("data.expression"), &d.expression, EXPRESSION_BYTES);
        }
        None => {}
    }
    sizes
        .text(&f("condition"), &spec.condition, CONDITION_BYTES)
        .text(
            &f("hit_condition"),
            &spec.hit_condition,
            HIT_CONDITION_BYTES,
        )
        .text(&f("label_selector"), &spec.label_selector, SELECTOR_BYTES)
        .text(&f("log_message"), &spec.log_message, LOG_MESSAGE_BYTES);
    sizes
}

/// Checks what a DAP launch or attach names.
#[allow(clippy::too_many_arguments)]
fn start_request(
    adapter: &str,
    adapter_command: &[String],
    labels: &HashMap<String, String>,
    name: &str,
    adapter_options: Option<&prost_types::Struct>,
    request_id: &str,
) -> Sizes {
    let mut sizes = Sizes::default();
    sizes
        .text("adapter", adapter, NAME_BYTES)
        .list("adapter_command", adapter_command, ARG_COUNT, ARGS_BYTES)
        .labels("labels", labels)
        .text("name", name, NAME_BYTES)
        .text("request_id", request_id, TOKEN_BYTES);
    if let Some(options) = adapter_options {
        sizes.encoded("adapter_options", options, ADAPTER_OPTIONS_BYTES);
    }
    sizes
}

/// `Launch`.
pub fn launch(r: &LaunchRequest) -> ApiResult<()> {
    let mut sizes = start_request(
        &r.adapter,
        &r.adapter_command,
        &r.labels,
        &r.name,
        r.adapter_options.as_ref(),
        &r.request_id,
    );
    sizes
        .text("program", &r.program, PATH_BYTES)
        .list("args", &r.args, ARG_COUNT, ARGS_BYTES)
        .text("cwd", &r.cwd, PATH_BYTES)
        .map("env", &r.env, ENV_COUNT, ENV_BYTES);
    sizes.check()
}

/// `Doctor`: the PATH it looks on is bounded like a launch's environment.
pub fn doctor(r: &DoctorRequest) -> ApiResult<()> {
    let mut sizes = Sizes::default();
    sizes.text("path", &r.path, ENV_BYTES);
    sizes.check()
}

/// `Attach`.
pub fn attach(r: &AttachRequest) -> ApiResult<()> {
    let mut sizes = start_request(
        &r.adapter,
        &r.adapter_command,
        &r.labels,
        &r.name,
        r.adapter_options.as_ref(),
        &r.request_id,
    );
    sizes.text("connect", &r.connect, TOKEN_BYTES);
    sizes.check()
}

/// A probe's `Hello`.
pub fn hello(h: &Hello) -> ApiResult<()> {
    Sizes::default()
        .text("hello.name", &h.name, NAME_BYTES)
        .text("hello.language", &h.language, NAME_BYTES)
        .text("hello.host", &h.host, NAME_BYTES)
        .labels("hello.labels", &h.labels)
        .text("hello.traceparent", &h.traceparent, TOKEN_BYTES)
        .text("hello.tracestate", &h.tracestate, TOKEN_BYTES)
        .text("hello.resume_session_id", &h.resume_session_id, TOKEN_BYTES)
        .check()
}

/// A probe's `Hit`. A hit over a limit is refused (`HitRefused`), and the
/// point goes on unheld.
pub fn hit(h: &Hit) -> ApiResult<()> {
    let mut sizes = Sizes::default();
    sizes
        .encoded("hit", h, HIT_BYTES)
        .text("hit.hit_id", &h.hit_id, TOKEN_BYTES)
        .size("hit.locals", h.locals.len(), LOCAL_COUNT)
        .size("hit.coor", h.coor.len(), DEPTH_COUNT)
        .text("hit.exception_message", &h.exception_message, MESSAGE_BYTES)
        .text("hit.traceparent", &h.traceparent, TOKEN_BYTES)
        .list(
            "hit.breakpoint_ids",
            &h.breakpoint_ids,
            BREAKPOINT_ID_COUNT,
            BREAKPOINT_IDS_BYTES,
        )
        .size("hit.stack", h.stack.len(), FRAME_COUNT);
    if let Some(point) = &h.point {
        point_info(&mut sizes, "hit.point", point);
    }
    for (i, local) in h.locals.iter().enumerate() {
        sizes.text(&format!("hit.locals[{i}].name"), &local.name, NAME_BYTES);
        if let Some(value) = &local.value {
            sizes.encoded(&format!("hit.locals[{i}].value"), value, VALUE_BYTES);
        }
    }
    if let Some(location) = &h.location {
        source_location(&mut sizes, "hit.location", location);
    }
    sizes.check()
}

fn point_info(sizes: &mut Sizes, prefix: &str, p: &PointInfo) {
    let f = |name: &str| format!("{prefix}.{name}");
    sizes
        .text(&f("kind"), &p.kind, NAME_BYTES)
        .text(&f("name"), &p.name, NAME_BYTES)
        .text(&f("type_hint"), &p.type_hint, NAME_BYTES)
        .labels(&f("labels"), &p.labels)
        .size(&f("scope_path"), p.scope_path.len(), DEPTH_COUNT);
    if let Some(payload) = &p.payload {
        sizes.encoded(&f("payload"), payload, VALUE_BYTES);
    }
    if let Some(schema) = &p.schema {
        sizes.encoded(&f("schema"), schema, VALUE_BYTES);
    }
}

fn source_location(sizes: &mut Sizes, prefix: &str, l: &stepd_proto::v1::Location) {
    sizes
        .text(&format!("{prefix}.path"), &l.path, PATH_BYTES)
        .text(&format!("{prefix}.function"), &l.function, NAME_BYTES)
        .text(&format!("{prefix}.module"), &l.module, NAME_BYTES);
}

/// One observed report of a probe's `Reports` (at `index`).
pub fn observed(o: &ObservedReport, index: usize) -> ApiResult<()> {
    // Field names relative to the report, spelt out in full only for a
    // refusal: a probe may send tens of thousands of these a second.
    let mut sizes = Sizes::default();
    sizes
        .encoded("", o, HIT_BYTES)
        .text("kind", &o.kind, NAME_BYTES)
        .text("name", &o.name, NAME_BYTES)
        .size("scope_path", o.scope_path.len(), DEPTH_COUNT)
        .size("coor", o.coor.len(), DEPTH_COUNT);
    if let Some(value) = &o.value {
        sizes.encoded("value", value, VALUE_BYTES);
    }
    sizes
        .within(|| format!("reports.observed[{index}]"))
        .check()
}

/// One enlighten report of a probe's `Reports` (at `index`).
pub fn enlighten(e: &EnlightenReport, index: usize) -> ApiResult<()> {
    Sizes::default()
        .text("value", &e.value, VALUE_BYTES)
        .size("coor", e.coor.len(), DEPTH_COUNT)
        .within(|| format!("reports.enlighten[{index}]"))
        .check()
}

/// One trace record of a probe's `Reports` (at `index`).
pub fn trace(t: &TraceReport, index: usize) -> ApiResult<()> {
    let prefix = format!("reports.trace[{index}]");
    let mut sizes = Sizes::default();
    sizes
        .encoded(&prefix, t, HIT_BYTES)
        .size(&format!("{prefix}.coor"), t.coor.len(), DEPTH_COUNT);
    if let Some(point) = &t.point {
        point_info(&mut sizes, &format!("{prefix}.point"), point);
    }
    if let Some(location) = &t.location {
        source_location(&mut sizes, &format!("{prefix}.location"), location);
    }
    sizes.check()
}

/// A probe's `EvalResult`: a result over a limit answers the EVAL with the
/// refusal instead.
pub fn eval_result(r: &EvalResult) -> ApiResult<()> {
    let mut sizes = Sizes::default();
    sizes.text("eval_result.value", &r.value, VALUE_BYTES).text(
        "eval_result.error",
        &r.error,
        MESSAGE_BYTES,
    );
    if let Some(structured) = &r.structured {
        sizes.encoded("eval_result.structured", structured, VALUE_BYTES);
    }
    sizes.check()
}

/// A debug input (`SendDebugInput`, or `DebugInput` on a Subscribe stream).
pub fn debug_input(input: &DebugInput, prefix: &str) -> ApiResult<()> {
    let mut sizes = Sizes::default();
    let f = |name: &str| format!("{prefix}{name}");
    sizes.text(&f("client_name"), &input.client_name, NAME_BYTES);
    match input.command.as_ref().and_then(|c| c.command.as_ref()) {
        Some(Command::Eval(c)) => {
            sizes.text(&f("command.eval.code"), &c.code, EXPRESSION_BYTES);
        }
        Some(Command::Expression(c)) => {
            sizes.text(&f("command.expression.code"), &c.code, EXPRESSION_BYTES);
        }
        Some(Command::InspectPrompt(c)) => {
            sizes.text(&f("command.inspect_prompt.code"), &c.code, EXPRESSION_BYTES);
        }
        Some(Command::Inject(c)) => match &c.replacement {
            Some(Replacement::Code(code)) => {
                sizes.text(&f("command.inject.code"), code, EXPRESSION_BYTES);
            }
            Some(Replacement::Value(value)) => {
                sizes.encoded(&f("command.inject.value"), value, VALUE_BYTES);
            }
            None => {}
        },
        Some(Command::Here(c)) => {
            sizes.text(&f("command.here.path"), &c.path, PATH_BYTES);
        }
        Some(Command::Jump(c)) => {
            sizes.text(&f("command.jump.path"), &c.path, PATH_BYTES);
        }
        _ => {}
    }
    sizes.check()
}

/// A `Watch` on a Subscribe stream.
pub fn watch(w: &Watch) -> ApiResult<()> {
    Sizes::default()
        .list(
            "watch.session_ids",
            &w.session_ids,
            WATCH_SESSION_COUNT,
            WATCH_SESSIONS_BYTES,
        )
        .text("watch.client_name", &w.client_name, NAME_BYTES)
        .text(
            "watch.resume_instance_id",
            &w.resume_instance_id,
            TOKEN_BYTES,
        )
        .check()
}

/// One page of `items` (in their order, each with its encoded size): at most
/// `page_size` of them (0 = no count limit) and at most `budget` bytes, but
/// always at least one. The bool says whether more follow.
pub fn page<T: Message>(
    items: impl IntoIterator<Item = T>,
    page_size: usize,
    budget: usize,
) -> (Vec<T>, bool) {
    let mut page = Vec::new();
    let mut bytes = 0usize;
    let mut items = items.into_iter().peekable();
    while let Some(item) = items.peek() {
        let size = framed_len(item);
        if !page.is_empty() && (bytes + size > budget || (page_size > 0 && page.len() >= page_size))
        {
            return (page, true);
        }
        bytes += size;
        page.extend(items.next());
    }
    (page, false)
}

/// An item's size inside a repeated field: its bytes, its length prefix and tag.
pub fn framed_len(item: &impl Message) -> usize {
    let len = item.encoded_len();
    len + prost::encoding::encoded_len_varint(len as u64) + 1
}

#[cfg(test)]
mod tests {
    use stepd_proto::v1::ProbeMatch;

    use super::*;

    #[test]
    fn a_spec_at_its_limits_passes() {
        let spec = BreakpointSpec {
            location: Some(Location::Probe(ProbeMatch {
                point_kind: "k".repeat(NAME_BYTES.max),
                name_glob: "g".repeat(GLOB_BYTES.max),
                ..Default::default()
            })),
            condition: "c".repeat(CONDITION_BYTES.max),
            hit_condition: "1".repeat(HIT_CONDITION_BYTES.max),
            ..Default::default()
        };
        assert!(breakpoint_spec(&spec, "spec").is_ok());
    }

    #[test]
    fn pages_keep_to_their_budget_and_hold_at_least_one() {
        let items: Vec<String> = (0..10).map(|i| "x".repeat(100 * (i + 1))).collect();
        let (first, more) = page(items.clone(), 0, 350);
        assert_eq!(first.len(), 2);
        assert!(more);
        let (alone, more) = page(items[9..].to_vec(), 0, 10);
        assert_eq!(alone.len(), 1);
        assert!(!more);
        let (counted, more) = page(items, 3, usize::MAX);
        assert_eq!((counted.len(), more), (3, true));
    }
}
