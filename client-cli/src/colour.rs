//! Colour for people at a terminal: locations, values and errors. Off when
//! `NO_COLOR` is set (to anything but "") or stdout is not a terminal, so
//! pipes and `--json` stay plain.

use std::{io::IsTerminal, sync::OnceLock};

/// Whether stepctl colours its output.
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        !no_color && std::io::stdout().is_terminal()
    })
}

fn paint(code: &str, text: &str) -> String {
    if enabled() && !text.is_empty() {
        format!("\x1b[{code}m{text}\x1b[0m")
    } else {
        text.to_owned()
    }
}

/// A place in the program: "file:line in function".
pub fn location(text: &str) -> String {
    paint("36", text)
}

/// A value the program holds.
pub fn value(text: &str) -> String {
    paint("32", text)
}

/// Something that failed.
pub fn error(text: &str) -> String {
    paint("31", text)
}

/// The line or frame the user is at.
pub fn current(text: &str) -> String {
    paint("1;33", text)
}
