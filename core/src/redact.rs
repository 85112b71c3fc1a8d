//! Redaction: values whose name matches a `--redact` pattern are masked
//! before anything leaves the daemon, in pauses, snapshots, trace events,
//! variables, the inspector and labels (a session's, a probe point's). A
//! pattern is a case-insensitive glob in the daemon's one dialect
//! (`crate::glob`: `*`, `?`, `[...]`, `\` escapes); one without `*` or `?`
//! matches any name that contains a match, so `password` masks
//! `db_password`; one that is not a well-formed glob is taken literally. Printed values that show names beside
//! values (`{'password': 'x'}`, `Password:x`, `(password = "x")`) have the
//! value after a matching name masked too.

use std::{borrow::Cow, collections::HashMap};

use crate::glob::Glob;
use stepd_proto::v1::{
    DebugCommand, DisplayValue, Local, Location, Pause, PointInfo, Variable, event::Payload,
};

/// What a masked value reads as: it says that it is a mask.
pub const MASK: &str = "<redacted>";

/// The `--redact` patterns.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    /// Compiled from the lowercased patterns; one with no wildcard is `*pattern*`.
    patterns: Vec<Glob>,
}

impl Redactor {
    /// A redactor for `patterns` (empty: masks nothing, at no cost).
    pub fn new(patterns: &[String]) -> Self {
        Self {
            patterns: patterns
                .iter()
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let p = p.to_lowercase();
                    let glob = Glob::parse(&p).unwrap_or_else(|_| Glob::literal(&p));
                    if p.contains(['*', '?']) {
                        glob
                    } else {
                        glob.anywhere()
                    }
                })
                .collect(),
        }
    }

    /// Whether any pattern is set.
    pub fn is_active(&self) -> bool {
        !self.patterns.is_empty()
    }

    /// Whether a value named `name` is masked.
    pub fn name(&self, name: &str) -> bool {
        if !self.is_active() || name.is_empty() {
            return false;
        }
        let name = name.to_lowercase();
        self.patterns.iter().any(|p| p.matches(&name))
    }

    /// `text` with the value after each matching name masked.
    pub fn text<'a>(&self, text: &'a str) -> Cow<'a, str> {
        if !self.is_active() {
            return Cow::Borrowed(text);
        }
        mask_pairs(text, |name| self.name(name))
    }

    /// A displayed value: masked whole when `name` matches, else its text.
    pub fn display(&self, name: &str, value: &mut DisplayValue) {
        if self.name(name) {
            *value = masked();
        } else if let Cow::Owned(text) = self.text(&value.text) {
            value.text = text;
        }
    }

    /// A local.
    pub fn local(&self, local: &mut Local) {
        if let Some(value) = &mut local.value {
            self.display(&local.name, value);
        }
    }

    /// A pause: its locals, its value and the exception text.
    pub fn pause(&self, pause: &mut Pause) {
        if !self.is_active() {
            return;
        }
        pause.locals.iter_mut().for_each(|l| self.local(l));
        if let Some(value) = &mut pause.debug_value {
            // Named by nothing: an EVAL's expression is judged where it is
            // evaluated (`PauseBook::evaluated`).
            self.display("", value);
        }
        if let Some(result) = pause.evaluation.as_mut().and_then(|e| e.result.as_mut()) {
            self.display("", result);
        }
        if let Cow::Owned(text) = self.text(&pause.caught_msg) {
            pause.caught_msg = text;
        }
        if let Some(location) = &mut pause.location {
            self.location(location);
        }
        if let Some(point) = &mut pause.point {
            self.point(point);
        }
    }

    /// A probe point: its payload's values under matching keys, and its
    /// labels.
    pub fn point(&self, point: &mut PointInfo) {
        if let Some(payload) = &mut point.payload {
            self.value(payload);
        }
        self.labels(&mut point.labels);
    }

    /// Labels as they may be shown: the value of a label whose name
    /// matches is masked (its name stays, so that it is set still shows),
    /// other values are scanned as printed values. Only copies that leave
    /// the daemon are masked: label selectors match the real values.
    pub fn labels(&self, labels: &mut HashMap<String, String>) {
        if !self.is_active() {
            return;
        }
        for (name, value) in labels.iter_mut() {
            if self.name(name) {
                MASK.clone_into(value);
            } else if let Cow::Owned(text) = self.text(value) {
                *value = text;
            }
        }
    }

    /// `labels`, masked as [`Self::labels`] does, in a copy.
    pub fn labels_of(&self, labels: &HashMap<String, String>) -> HashMap<String, String> {
        let mut shown = labels.clone();
        self.labels(&mut shown);
        shown
    }

    /// A structured value, in place.
    pub fn value(&self, value: &mut prost_types::Value) {
        use prost_types::value::Kind;
        match &mut value.kind {
            Some(Kind::StructValue(object)) => {
                for (key, field) in &mut object.fields {
                    if self.name(key) {
                        field.kind = Some(Kind::StringValue(MASK.to_owned()));
                    } else {
                        self.value(field);
                    }
                }
            }
            Some(Kind::ListValue(list)) => list.values.iter_mut().for_each(|v| self.value(v)),
            Some(Kind::StringValue(text)) => {
                if let Cow::Owned(masked) = self.text(text) {
                    *text = masked;
                }
            }
            _ => {}
        }
    }

    /// A location: the source shown with it can hold a secret written there.
    pub fn location(&self, location: &mut Location) {
        if let Some(excerpt) = &mut location.excerpt {
            for line in &mut excerpt.lines {
                if let Cow::Owned(text) = self.text(line) {
                    *line = text;
                }
            }
        }
    }

    /// An event about to be published.
    pub fn payload(&self, payload: &mut Payload) {
        if !self.is_active() {
            return;
        }
        match payload {
            Payload::Stopped(stopped) => {
                if let Some(pause) = &mut stopped.pause {
                    self.pause(pause);
                }
            }
            Payload::BreakpointSnapshot(snapshot) => {
                snapshot.locals.iter_mut().for_each(|l| self.local(l));
                snapshot.frames.iter_mut().for_each(|f| self.location(f));
            }
            Payload::Trace(trace) => {
                trace.changed_locals.iter_mut().for_each(|l| self.local(l));
                if let Some(location) = &mut trace.location {
                    self.location(location);
                }
                if let Some(point) = &mut trace.point {
                    self.point(point);
                }
                if let Some(value) = &mut trace.value {
                    self.display("", value);
                }
            }
            _ => {}
        }
    }

    /// A debug input as the history keeps it: a value given (INJECT's) is
    /// masked as a payload is, code (INJECT's, EVAL's, an EXPRESSION) as
    /// printed text, so `login(password='s3cret')` keeps no secret.
    pub fn command(&self, command: &mut DebugCommand) {
        use stepd_proto::v1::{debug_command::Command as C, inject_command::Replacement};
        if !self.is_active() {
            return;
        }
        let code = match &mut command.command {
            Some(C::Inject(inject)) => match &mut inject.replacement {
                Some(Replacement::Value(value)) => return self.value(value),
                Some(Replacement::Code(code)) => code,
                None => return,
            },
            Some(C::Eval(eval)) => &mut eval.code,
            Some(C::InspectPrompt(prompt)) => &mut prompt.code,
            Some(C::Expression(expression)) => &mut expression.code,
            _ => return,
        };
        if let Cow::Owned(text) = self.text(code) {
            *code = text;
        }
    }

    /// A variable (or an evaluation, named by its expression).
    pub fn variable(&self, variable: &mut Variable) {
        if !self.is_active() {
            return;
        }
        if self.name(last_name(&variable.name)) {
            variable.value = MASK.to_owned();
            variable.variables_ref.clear();
            variable.named_variables = 0;
            variable.indexed_variables = 0;
        } else if let Cow::Owned(text) = self.text(&variable.value) {
            variable.value = text;
        }
    }
}

/// The mask as a displayed value.
pub fn masked() -> DisplayValue {
    DisplayValue {
        text: MASK.to_owned(),
        r#type: "redacted".to_owned(),
        truncated: false,
    }
}

/// The last name of an expression path: `user.password`, `d['api_key']`
/// and `self->token` end in the name that decides.
pub fn last_name(expression: &str) -> &str {
    let trimmed = expression.trim_end_matches([']', '\'', '"', ' ', ')']);
    let start = trimmed
        .rfind(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-'))
        .map_or(0, |i| {
            i + trimmed[i..].chars().next().map_or(1, char::len_utf8)
        });
    &trimmed[start..]
}

/// Masks the value after every `NAME:` / `NAME =` / `"NAME":` whose name
/// `matches`: a quoted value to its closing quote, a bracketed one to its
/// matching bracket, anything else to the next separator.
fn mask_pairs<'a>(text: &'a str, matches: impl Fn(&str) -> bool) -> Cow<'a, str> {
    let bytes = text.as_bytes();
    let mut out: Option<String> = None;
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if !(c.is_ascii_alphanumeric() || c == b'_') {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len()
            && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_' || bytes[i] == b'-')
        {
            i += 1;
        }
        let name = &text[start..i];
        let mut j = i;
        if j < bytes.len() && (bytes[j] == b'\'' || bytes[j] == b'"') {
            j += 1;
        }
        while j < bytes.len() && bytes[j] == b' ' {
            j += 1;
        }
        let separated = j < bytes.len()
            && (bytes[j] == b':' || (bytes[j] == b'=' && bytes.get(j + 1) != Some(&b'=')));
        if !separated || !matches(name) {
            continue;
        }
        j += 1;
        while j < bytes.len() && bytes[j] == b' ' {
            j += 1;
        }
        let end = value_end(bytes, j);
        if end > j {
            let buf = out.get_or_insert_with(|| String::with_capacity(text.len()));
            buf.push_str(&text[copied..j]);
            buf.push_str(MASK);
            copied = end;
        }
        i = end.max(i);
    }
    match out {
        None => Cow::Borrowed(text),
        Some(mut buf) => {
            buf.push_str(&text[copied..]);
            Cow::Owned(buf)
        }
    }
}

/// Where a value starting at `at` ends.
fn value_end(bytes: &[u8], at: usize) -> usize {
    let Some(&first) = bytes.get(at) else {
        return at;
    };
    match first {
        b'\'' | b'"' => {
            let mut k = at + 1;
            while k < bytes.len() {
                match bytes[k] {
                    b'\\' => k += 2,
                    c if c == first => return k + 1,
                    _ => k += 1,
                }
            }
            bytes.len()
        }
        b'{' | b'[' | b'(' => {
            let mut depth = 0usize;
            let mut k = at;
            while k < bytes.len() {
                match bytes[k] {
                    b'{' | b'[' | b'(' => depth += 1,
                    b'}' | b']' | b')' => {
                        depth -= 1;
                        if depth == 0 {
                            return k + 1;
                        }
                    }
                    _ => {}
                }
                k += 1;
            }
            bytes.len()
        }
        _ => {
            let mut k = at;
            while k < bytes.len()
                && !matches!(bytes[k], b',' | b';' | b'}' | b')' | b']' | b' ' | b'\n')
            {
                k += 1;
            }
            k
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(patterns: &[&str]) -> Redactor {
        Redactor::new(&patterns.iter().map(|p| p.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn names_match_case_insensitively_and_as_substrings() {
        let r = r(&["password", "api_*"]);
        assert!(r.name("password"));
        assert!(r.name("DB_Password"));
        assert!(r.name("api_key"));
        assert!(!r.name("user"));
        assert!(!r.name("my_api_key"), "a glob matches the whole name");
        assert!(!Redactor::default().name("password"));
    }

    #[test]
    fn printed_values_lose_the_values_of_matching_names() {
        let r = r(&["password", "token"]);
        assert_eq!(
            r.text("{'user': 'ann', 'password': 'hunter2', 'n': 3}"),
            "{'user': 'ann', 'password': <redacted>, 'n': 3}"
        );
        assert_eq!(
            r.text(r#"{"token":"abc\"def","x":1}"#),
            r#"{"token":<redacted>,"x":1}"#
        );
        assert_eq!(
            r.text("main.Creds{User:ann, Password:hunter2}"),
            "main.Creds{User:ann, Password:<redacted>}"
        );
        assert_eq!(
            r.text("(user = \"ann\", password = \"hunter2\")"),
            "(user = \"ann\", password = <redacted>)"
        );
        assert_eq!(
            r.text("{'password': {'a': [1, 2]}, 'b': 1}"),
            "{'password': <redacted>, 'b': 1}"
        );
        assert_eq!(r.text("password == 3"), "password == 3");
        assert!(matches!(r.text("nothing here"), Cow::Borrowed(_)));
    }

    #[test]
    fn expressions_are_judged_by_their_last_name() {
        assert_eq!(last_name("user.password"), "password");
        assert_eq!(last_name("d['api_key']"), "api_key");
        assert_eq!(last_name("self->token"), "token");
        assert_eq!(last_name("password"), "password");
        let mut v = Variable {
            name: "creds.password".into(),
            value: "'hunter2'".into(),
            variables_ref: "1.2".into(),
            ..Default::default()
        };
        r(&["password"]).variable(&mut v);
        assert_eq!(v.value, MASK);
        assert!(v.variables_ref.is_empty());
    }

    #[test]
    fn labels_lose_the_values_of_matching_names_and_keep_their_names() {
        let labels = HashMap::from([
            ("API_Token".to_owned(), "s3cret".to_owned()),
            ("team".to_owned(), "a".to_owned()),
            ("cmd".to_owned(), "run --token=abc".to_owned()),
        ]);
        let shown = r(&["token"]).labels_of(&labels);
        assert_eq!(shown["API_Token"], MASK);
        assert_eq!(shown["team"], "a");
        assert_eq!(shown["cmd"], "run --token=<redacted>");
        assert_eq!(Redactor::default().labels_of(&labels), labels);
        let mut point = PointInfo {
            labels,
            ..Default::default()
        };
        r(&["api_token"]).point(&mut point);
        assert_eq!(point.labels["API_Token"], MASK);
    }

    #[test]
    fn the_glob_is_linear_enough_for_pathological_patterns() {
        let text = "a".repeat(4096);
        assert!(!r(&["*a*a*a*a*a*a*a*a*b"]).name(&text));
    }

    #[test]
    fn patterns_are_the_breakpoint_glob_dialect() {
        // Classes, negated classes and escapes, as in a probe breakpoint's name glob.
        let r = r(&["key[0-9]", "tok[!x]n", "a\\*b", "pass?ord", "[unclosed"]);
        assert!(
            r.name("KEY7") && r.name("my_key3_x"),
            "no '*' or '?': contained"
        );
        assert!(!r.name("keyx"));
        assert!(r.name("token") && r.name("the_tokens") && !r.name("toxn"));
        assert!(r.name("a*b") && !r.name("aXb"), "an escaped star is a star");
        assert!(
            r.name("PassWord") && !r.name("my_password"),
            "a wildcard glob matches the whole name"
        );
        assert!(r.name("x[unclosed"), "a malformed glob is taken literally");
    }
}
