//! Function names as their language's users write them. Adapters show
//! symbols: lldb gives a Rust function with its hash and escapes
//! (`main::Counter::bump::h1a400d954bcab7ba`, `{{closure}}` as
//! `_$u7b$$u7b$closure$u7d$$u7d$`); dlv gives Go's linker names
//! (`main.(*Counter).bump`, `github.com/org/app/store.(*DB).Get`). A frame is
//! shown as `main::Counter::bump`, `Counter.bump` and `store.DB.Get`; Go's
//! full import path stays in the location's `module`.

use crate::kind::AdapterKind;

/// A frame's function name, readable for the adapter's languages; and, for
/// Go, the package path it drops (None: nothing dropped).
pub fn readable(kind: AdapterKind, name: &str) -> (String, Option<String>) {
    match kind {
        AdapterKind::Lldb | AdapterKind::Gdb => (rust(name), None),
        AdapterKind::Dlv => go(name),
        _ => (name.to_owned(), None),
    }
}

/// A Rust symbol without its hash, its legacy escapes decoded; other
/// names (C, C++) unchanged.
fn rust(name: &str) -> String {
    let name = match name.rsplit_once("::h") {
        Some((path, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => {
            path
        }
        _ => name,
    };
    if !name.contains('$') {
        return name.to_owned();
    }
    const ESCAPES: [(&str, &str); 15] = [
        ("$SP$", "@"),
        ("$BP$", "*"),
        ("$RF$", "&"),
        ("$LT$", "<"),
        ("$GT$", ">"),
        ("$LP$", "("),
        ("$RP$", ")"),
        ("$C$", ","),
        ("$u7e$", "~"),
        ("$u20$", " "),
        ("$u27$", "'"),
        ("$u5b$", "["),
        ("$u5d$", "]"),
        ("$u7b$", "{"),
        ("$u7d$", "}"),
    ];
    let mut out = name.to_owned();
    for (escape, plain) in ESCAPES {
        out = out.replace(escape, plain);
    }
    // `..` is a path separator inside an escaped segment, and a segment
    // that starts with an escape gets a leading underscore.
    out = out
        .replace("..", "::")
        .replace("::_{", "::{")
        .replace("::_<", "::<");
    match out.strip_prefix("_<") {
        Some(rest) => format!("<{rest}"),
        None => out,
    }
}

/// A Go symbol as Go source names it: the receiver's pointer and parentheses
/// dropped, the package's last path element kept except for `main`.
fn go(symbol: &str) -> (String, Option<String>) {
    let slash = symbol.rfind('/').map_or(0, |s| s + 1);
    let Some(dot) = symbol[slash..].find('.') else {
        return (symbol.to_owned(), None);
    };
    let (package, rest) = (&symbol[..slash + dot], &symbol[slash + dot + 1..]);
    let rest = rest.replace("[...]", "");
    let parts: Vec<&str> = rest
        .split('.')
        .map(|part| {
            part.trim_start_matches('(')
                .trim_start_matches('*')
                .trim_end_matches(')')
        })
        .collect();
    let name = parts.join(".");
    let package = package.replace("%2e", ".");
    let shown = if package == "main" {
        name
    } else {
        format!(
            "{}.{name}",
            &package[package.rfind('/').map_or(0, |s| s + 1)..]
        )
    };
    (shown, Some(package))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_symbols_lose_their_hash_and_escapes() {
        let cases = [
            (
                "main::Counter::bump::h1a400d954bcab7ba",
                "main::Counter::bump",
            ),
            (
                "std::rt::lang_start::_$u7b$$u7b$closure$u7d$$u7d$::hdbee5a3fa7ab6636",
                "std::rt::lang_start::{{closure}}",
            ),
            (
                "_$LT$alloc..vec..Vec$LT$T$GT$$u20$as$u20$core..ops..Drop$GT$::drop::h0123456789abcdef",
                "<alloc::vec::Vec<T> as core::ops::Drop>::drop",
            ),
            // C and C++ names, and a method that merely starts with h.
            ("__libc_start_call_main", "__libc_start_call_main"),
            ("ns::Widget::hello", "ns::Widget::hello"),
            ("step", "step"),
        ];
        for (symbol, want) in cases {
            assert_eq!(readable(AdapterKind::Lldb, symbol).0, want, "{symbol}");
        }
    }

    #[test]
    fn go_symbols_read_as_go_source() {
        let cases = [
            ("main.(*Counter).bump", "Counter.bump", "main"),
            ("main.main", "main", "main"),
            ("main.main.func1", "main.func1", "main"),
            (
                "github.com/org/app/store.(*DB).Get",
                "store.DB.Get",
                "github.com/org/app/store",
            ),
            (
                "gopkg.in/yaml%2ev3.(*decoder).unmarshal",
                "yaml.v3.decoder.unmarshal",
                "gopkg.in/yaml.v3",
            ),
            ("main.Map[...].Get", "Map.Get", "main"),
            ("runtime.goexit", "runtime.goexit", "runtime"),
        ];
        for (symbol, want, package) in cases {
            let (shown, module) = readable(AdapterKind::Dlv, symbol);
            assert_eq!(
                (shown.as_str(), module.as_deref()),
                (want, Some(package)),
                "{symbol}"
            );
        }
        // Python names are left alone.
        assert_eq!(readable(AdapterKind::Debugpy, "a.b").0, "a.b");
    }
}
