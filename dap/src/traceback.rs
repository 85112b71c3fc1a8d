//! Adapter error messages without the adapter's own insides: debugpy answers
//! an evaluation that fails with a Python traceback that runs through
//! pydevd's files before it reaches the user's expression, twenty lines a
//! user cannot act on (and which fill stepd's bounded error message before
//! the error itself).

/// `message` without the traceback frames in the debugger's own files; a
/// traceback left with no frame loses its header too. Other messages are
/// returned as they are.
pub fn without_debugger_frames(message: &str) -> String {
    const HEADER: &str = "Traceback (most recent call last):";
    if !message.contains(HEADER) {
        return message.to_owned();
    }
    let mut kept: Vec<&str> = Vec::new();
    let mut frames_kept = 0;
    let mut skipping = false;
    let mut header_at = None;
    for line in message.lines() {
        if line.trim_end() == HEADER {
            header_at = Some(kept.len());
            kept.push(line);
            skipping = false;
            continue;
        }
        if let Some(frame) = line.strip_prefix("  File \"") {
            skipping = is_debugger_file(frame.split('"').next().unwrap_or_default());
            if !skipping {
                frames_kept += 1;
                kept.push(line);
            }
            continue;
        }
        // A frame's source line (and caret lines) are indented further.
        if skipping && line.starts_with("    ") {
            continue;
        }
        skipping = false;
        kept.push(line);
    }
    if frames_kept == 0
        && let Some(at) = header_at
    {
        kept.remove(at);
    }
    kept.join("\n")
}

fn is_debugger_file(path: &str) -> bool {
    ["pydevd", "_pydev", "/debugpy/"]
        .iter()
        .any(|mark| path.contains(mark))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_syntax_error_keeps_only_the_users_expression() {
        let message = "Traceback (most recent call last):\n  \
            File \"/venv/lib/python3.11/site-packages/debugpy/_vendored/pydevd/_pydevd_bundle/pydevd_vars.py\", line 370, in evaluate_expression\n    \
            compiled = compile_as_eval(expression)\n  \
            File \"/venv/lib/python3.11/site-packages/debugpy/_vendored/pydevd/_pydevd_bundle/pydevd_vars.py\", line 290, in compile_as_eval\n    \
            return compile(_expression_to_evaluate(expression), '<string>', 'eval')\n  \
            File \"<string>\", line 1\n    \
            1+\n      \
            ^\n\
            SyntaxError: invalid syntax\n";
        assert_eq!(
            without_debugger_frames(message),
            "Traceback (most recent call last):\n  File \"<string>\", line 1\n    1+\n      ^\nSyntaxError: invalid syntax"
        );
    }

    #[test]
    fn a_users_frames_stay_and_the_header_goes_with_the_last_frame() {
        let user = "Traceback (most recent call last):\n  \
            File \"/x/debugpy/_vendored/pydevd/pydevd.py\", line 1, in f\n    \
            x()\n  \
            File \"/app/main.py\", line 3, in boom\n    \
            raise ValueError(\"bad\")\n\
            ValueError: bad";
        assert_eq!(
            without_debugger_frames(user),
            "Traceback (most recent call last):\n  File \"/app/main.py\", line 3, in boom\n    raise ValueError(\"bad\")\nValueError: bad"
        );
        let only_debugger = "Traceback (most recent call last):\n  \
            File \"/x/_pydevd_bundle/pydevd_vars.py\", line 1, in f\n    \
            eval(x)\n\
            NameError: name 'nope' is not defined";
        assert_eq!(
            without_debugger_frames(only_debugger),
            "NameError: name 'nope' is not defined"
        );
        assert_eq!(
            without_debugger_frames("no such variable"),
            "no such variable"
        );
    }
}
