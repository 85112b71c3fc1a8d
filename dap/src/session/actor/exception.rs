//! What an exception stop says: the exception's own text for `caught_msg`,
//! the exception breakpoints it came from, and the signal a crash is, so
//! that the session's end can name it.

use serde_json::json;

use super::Actor;
use crate::capability::Capability;
use crate::messages::{EvaluateResponse, ExceptionInfoResponse, StackTraceResponse, StoppedEvent};

/// What exceptionInfo (or the stopped event) says about an exception stop.
#[derive(Debug, Default)]
pub(super) struct Caught {
    /// The message for `caught_msg`.
    pub message: String,
    /// The adapter's exception id ("cpp_throw", "signal", "ValueError", …).
    pub exception_id: String,
}

impl Actor {
    /// The exception breakpoints an exception stop is about: those with the
    /// filter that caught it when the adapter says which (lldb's exception
    /// id, debugpy's break mode), else all of them. Their verdicts decide
    /// the stop, so their conditions, hit conditions and actions count.
    pub(super) async fn caught_by(&self, thread_id: i64) -> Vec<String> {
        let placed = &self.exception_breakpoints;
        let all = || placed.iter().map(|(id, _)| id.clone()).collect();
        let one_kind = placed.windows(2).all(|w| w[0].1 == w[1].1);
        if placed.is_empty()
            || (one_kind && !self.adapter.kind.names_exception_stops_by_filter())
            || !self.shared.supports(Capability::ExceptionInfoRequest)
        {
            return all();
        }
        let info = self
            .client
            .call::<ExceptionInfoResponse>("exceptionInfo", json!({"threadId": thread_id}))
            .await;
        let filter = info.ok().and_then(|info| {
            self.adapter
                .kind
                .filter_that_caught(&info.exception_id, info.break_mode.as_deref())
        });
        match filter {
            Some(filter) => placed
                .iter()
                .filter(|(_, filters)| filters.contains(&filter))
                .map(|(id, _)| id.clone())
                .collect(),
            None => all(),
        }
    }

    /// The exception of the stop on `thread_id`. lldb answers exceptionInfo
    /// of a C++ throw with the filter's label ("C++ Throw"), so there the
    /// thrown object is read instead; a signal's description ("signal
    /// SIGSEGV: …") is kept and the signal remembered for the end.
    pub(super) async fn exception_message(
        &mut self,
        thread_id: i64,
        stop: &StoppedEvent,
    ) -> String {
        let caught = self.caught(thread_id, stop).await;
        self.life.crashed(signal_of(&caught.message));
        self.exception_id = caught.exception_id;
        caught.message
    }

    async fn caught(&self, thread_id: i64, stop: &StoppedEvent) -> Caught {
        let from_event = stop
            .text
            .as_deref()
            .filter(|t| !t.is_empty())
            .or(stop.description.as_deref())
            .unwrap_or_default()
            .to_owned();
        if !self.shared.supports(Capability::ExceptionInfoRequest) {
            return Caught {
                message: from_event,
                exception_id: String::new(),
            };
        }
        let info = self
            .client
            .call::<ExceptionInfoResponse>("exceptionInfo", json!({"threadId": thread_id}))
            .await;
        let Some(info) = self.reported(info) else {
            return Caught {
                message: from_event,
                exception_id: String::new(),
            };
        };
        let id = info.exception_id;
        let description = info.description.as_deref().unwrap_or_default();
        if self.adapter.kind.names_exception_stops_by_filter()
            && self.is_filter_label(&id, description)
        {
            let message = if id == "cpp_throw" {
                self.thrown_cpp_exception(thread_id).await
            } else {
                None
            };
            return Caught {
                message: message.unwrap_or_else(|| description.to_owned()),
                exception_id: id,
            };
        }
        let message = if description.is_empty() {
            from_event
        } else if id.is_empty() || description.starts_with(&id) {
            description.to_owned()
        } else {
            format!("{id}: {description}")
        };
        Caught {
            message,
            exception_id: id,
        }
    }

    /// Whether `description` is only the label of the exception filter `id`.
    fn is_filter_label(&self, id: &str, description: &str) -> bool {
        self.session
            .exception_filters
            .iter()
            .any(|f| f.id == id && (f.label == description || description.is_empty()))
    }

    /// "std::runtime_error: bad value 42" for the object being thrown, read in
    /// `__cxa_throw`'s frame: its first argument is the object, its second the
    /// `std::type_info`. `what()` is called only when the type derives from
    /// `std::exception` along single inheritance, so no other method of the
    /// program is ever run; otherwise the type name alone is given.
    async fn thrown_cpp_exception(&self, thread_id: i64) -> Option<String> {
        let frames = self
            .client
            .call::<StackTraceResponse>(
                "stackTrace",
                json!({"threadId": thread_id, "startFrame": 0, "levels": 1}),
            )
            .await;
        let frame = self.reported(frames)?.stack_frames.first()?.id;
        let eval = |expression: String| async move {
            let answer = self
                .client
                .call::<EvaluateResponse>(
                    "evaluate",
                    json!({"expression": expression, "frameId": frame, "context": "watch"}),
                )
                .await;
            self.reported(answer).map(|b| b.value)
        };
        // An Itanium type_info is {vtable, name}; a single-inheritance class's
        // (__si_class_type_info) adds the base's type_info.
        let mut type_info = "$arg2".to_owned();
        let mut name = None;
        let mut is_exception = false;
        for _ in 0..8 {
            let Some(mangled) = eval(format!("*(const char **)((char *){type_info} + 8)"))
                .await
                .and_then(|r| quoted(&r))
            else {
                break;
            };
            if name.is_none() {
                name = Some(demangle(&mangled));
            }
            if mangled == "St9exception" {
                is_exception = true;
                break;
            }
            let Some(base) = eval(format!("*(void **)((char *){type_info} + 16)"))
                .await
                .and_then(|r| pointer(&r))
            else {
                break;
            };
            type_info = format!("0x{base:x}");
        }
        let name = name?;
        if !is_exception {
            return Some(name);
        }
        // what() is the third slot of std::exception's vtable (after the two
        // destructors).
        let what =
            eval("((const char *(*)(void *))((*(void ***)$arg1)[2]))((void *)$arg1)".to_owned())
                .await
                .and_then(|r| quoted(&r));
        Some(match what {
            Some(what) => format!("{name}: {what}"),
            None => name,
        })
    }
}

/// The signal a stop's message names ("signal SIGSEGV: …" → "SIGSEGV").
pub(super) fn signal_of(message: &str) -> Option<String> {
    let name = message.strip_prefix("signal ")?;
    let name: String = name
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric())
        .collect();
    (name.starts_with("SIG") && signal_number(&name).is_some()).then_some(name)
}

/// The name of a signal by number, on this system.
pub(super) fn signal_name(number: i32) -> Option<&'static str> {
    SIGNALS
        .into_iter()
        .find(|name| signal_number(name) == Some(number))
}

/// The signals named in stops and ends.
const SIGNALS: [&str; 16] = [
    "SIGHUP", "SIGINT", "SIGQUIT", "SIGILL", "SIGTRAP", "SIGABRT", "SIGBUS", "SIGFPE", "SIGKILL",
    "SIGUSR1", "SIGSEGV", "SIGUSR2", "SIGPIPE", "SIGALRM", "SIGTERM", "SIGSYS",
];

/// The number of a signal by name, on this system.
pub(super) fn signal_number(name: &str) -> Option<i32> {
    Some(match name {
        "SIGHUP" => libc::SIGHUP,
        "SIGINT" => libc::SIGINT,
        "SIGQUIT" => libc::SIGQUIT,
        "SIGILL" => libc::SIGILL,
        "SIGTRAP" => libc::SIGTRAP,
        "SIGABRT" => libc::SIGABRT,
        "SIGBUS" => libc::SIGBUS,
        "SIGFPE" => libc::SIGFPE,
        "SIGKILL" => libc::SIGKILL,
        "SIGUSR1" => libc::SIGUSR1,
        "SIGSEGV" => libc::SIGSEGV,
        "SIGUSR2" => libc::SIGUSR2,
        "SIGPIPE" => libc::SIGPIPE,
        "SIGALRM" => libc::SIGALRM,
        "SIGTERM" => libc::SIGTERM,
        "SIGSYS" => libc::SIGSYS,
        _ => return None,
    })
}

/// The text of a C string as lldb shows it: `0x… "text"`.
fn quoted(result: &str) -> Option<String> {
    let start = result.find('"')?;
    let end = result.rfind('"')?;
    (end > start).then(|| result[start + 1..end].replace("\\\"", "\""))
}

/// A pointer as lldb shows it: `0x00007ffff7d9c420` (0 is none).
fn pointer(result: &str) -> Option<u64> {
    let hex = result.split_whitespace().next()?.strip_prefix("0x")?;
    u64::from_str_radix(hex, 16).ok().filter(|p| *p != 0)
}

/// The readable name of an Itanium-mangled type name, for the plain forms
/// exception types have ("St13runtime_error", "N3app5ErrorE"); anything
/// else is returned as it is.
fn demangle(mangled: &str) -> String {
    let inner = mangled
        .strip_prefix('N')
        .and_then(|m| m.strip_suffix('E'))
        .unwrap_or(mangled);
    let (mut parts, mut rest) = match inner.strip_prefix("St") {
        Some(rest) => (vec!["std".to_owned()], rest),
        None => (Vec::new(), inner),
    };
    while !rest.is_empty() {
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        let Some(len) = rest[..digits].parse::<usize>().ok().filter(|_| digits > 0) else {
            return mangled.to_owned();
        };
        let Some(part) = rest.get(digits..digits + len) else {
            return mangled.to_owned();
        };
        parts.push(part.to_owned());
        rest = &rest[digits + len..];
    }
    if parts.is_empty() {
        mangled.to_owned()
    } else {
        parts.join("::")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_are_read_from_lldb_descriptions() {
        assert_eq!(
            signal_of("signal SIGSEGV: address not mapped to object (fault address: 0x0)"),
            Some("SIGSEGV".into())
        );
        assert_eq!(signal_of("signal SIGABRT"), Some("SIGABRT".into()));
        assert_eq!(signal_of("C++ Throw"), None);
        assert_eq!(signal_of("signal SIGNOPE"), None);
        assert_eq!(signal_number("SIGSEGV"), Some(11));
    }

    #[test]
    fn exception_type_names_are_demangled() {
        assert_eq!(demangle("St13runtime_error"), "std::runtime_error");
        assert_eq!(demangle("N3app5ErrorE"), "app::Error");
        assert_eq!(demangle("NSt3__112system_errorE"), "std::__1::system_error");
        assert_eq!(demangle("i"), "i");
        assert_eq!(demangle("4Oops"), "Oops");
        assert_eq!(demangle("5Oops"), "5Oops");
    }

    #[test]
    fn lldb_values_are_read() {
        assert_eq!(
            quoted("0x000055555556af68 \"bad value 42\""),
            Some("bad value 42".into())
        );
        assert_eq!(quoted("0x0"), None);
        assert_eq!(pointer("0x00007ffff7d9c420"), Some(0x7fff_f7d9_c420));
        assert_eq!(pointer("0x0000000000000000"), None);
    }
}
